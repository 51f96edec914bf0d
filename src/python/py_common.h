// The Python module's shared pieces: C API statuses as Python exceptions,
// and array checks that say what was expected (dtype, shape, contiguity).
// The module calls only the C API (include/turbokv.h): what Python users get
// is what C users get, tested twice.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "turbokv.h"

namespace tkv_py {

namespace py = pybind11;

// Raises the Python exception for a failed status, with tkv_last_error().
// ARGUMENT, BUFFER, FORMAT, VALUE: ValueError; IO: OSError; MEMORY:
// MemoryError; anything else: RuntimeError.
[[noreturn]] void raise(tkv_status s);
inline void check(tkv_status s) {
  if (s != TKV_OK) raise(s);
}

// "float32[1000, 128]" for an array (its dtype and shape).
std::string describe(const py::array& a);

// Checks that `a` is a C-contiguous array of dtype T with `dims` dimensions
// (one of `ndims_ok`), and that each fixed dimension (>= 0) matches; raises
// TypeError (dtype) or ValueError (shape, contiguity) naming `what` and the
// expected form, e.g. "x must be a C-contiguous float32[n, 128] array".
template <typename T>
py::array_t<T> checked(const py::handle& obj, const std::string& what, const std::vector<long>& shape,
                       const std::string& expected);

// A new C-contiguous array for a call's output. Large ones (8 MiB and up)
// are mapped on transparent huge pages: a 1M-row output is then touched in
// 2 MiB pages, not 4 KiB ones, and the page faults of a fresh array (about a
// tenth of q8_0's quantize time on 4 KiB pages) mostly go away.
template <typename T>
py::array_t<T> new_array(const std::vector<py::ssize_t>& shape);

void bind_codec(py::module_& m);
void bind_model(py::module_& m);

}  // namespace tkv_py
