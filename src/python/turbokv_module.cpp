// The turbokv Python module: codecs, codebooks, the fused attention kernel,
// kv-stats and calibration on arrays (this file), and models
// (turbokv_model.cpp), over the C API. Long calls release the GIL.
#include <sys/mman.h>

#include <cstring>

#include "python/py_common.h"

namespace tkv_py {

void raise(tkv_status s) {
  const std::string msg = tkv_last_error();
  switch (s) {
    case TKV_ERR_ARGUMENT:
    case TKV_ERR_BUFFER:
    case TKV_ERR_FORMAT:
    case TKV_ERR_VALUE: throw py::value_error(msg);
    case TKV_ERR_IO: {
      PyErr_SetString(PyExc_OSError, msg.c_str());
      throw py::error_already_set();
    }
    case TKV_ERR_MEMORY: {
      PyErr_SetString(PyExc_MemoryError, msg.c_str());
      throw py::error_already_set();
    }
    default: throw std::runtime_error(std::string(tkv_status_name(s)) + ": " + msg);
  }
}

std::string describe(const py::array& a) {
  std::string s = py::str(a.dtype()).cast<std::string>() + "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

template <typename T>
py::array_t<T> checked(const py::handle& obj, const std::string& what, const std::vector<long>& shape,
                       const std::string& expected) {
  const std::string want = what + " must be a C-contiguous " + expected + " array";
  if (!py::isinstance<py::array>(obj)) throw py::type_error(want + ", got " + std::string(py::str(obj.get_type())));
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<T>()))
    throw py::type_error(want + ", got " + describe(a) + " (convert it with .astype(numpy." +
                         py::str(py::dtype::of<T>()).cast<std::string>() + "))");
  if (a.ndim() != static_cast<py::ssize_t>(shape.size())) throw py::value_error(want + ", got " + describe(a));
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] >= 0 && a.shape(i) != shape[i]) throw py::value_error(want + ", got " + describe(a));
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(want + ", got a non-contiguous " + describe(a) + " (use numpy.ascontiguousarray)");
  return py::reinterpret_borrow<py::array_t<T>>(a);
}
template <typename T>
py::array_t<T> new_array(const std::vector<py::ssize_t>& shape) {
  size_t n = 1;
  for (py::ssize_t s : shape) n *= static_cast<size_t>(s);
  const size_t bytes = n * sizeof(T);
  if (bytes < (size_t{8} << 20)) return py::array_t<T>(shape);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return py::array_t<T>(shape);  // numpy's allocator then
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: ignored where unsupported
  struct Mapping {
    void* p;
    size_t n;
  };
  py::capsule owner(new Mapping{p, bytes}, [](void* m) {
    auto* map = static_cast<Mapping*>(m);
    ::munmap(map->p, map->n);
    delete map;
  });
  return py::array_t<T>(shape, static_cast<T*>(p), owner);
}
template py::array_t<float> new_array<float>(const std::vector<py::ssize_t>&);
template py::array_t<uint8_t> new_array<uint8_t>(const std::vector<py::ssize_t>&);

template py::array_t<float> checked<float>(const py::handle&, const std::string&, const std::vector<long>&,
                                           const std::string&);
template py::array_t<uint8_t> checked<uint8_t>(const py::handle&, const std::string&, const std::vector<long>&,
                                               const std::string&);

namespace {

// A codec handle owned by Python.
struct Codec {
  tkv_codec* c = nullptr;
  Codec() = default;
  Codec(const Codec&) = delete;
  ~Codec() { tkv_codec_free(c); }
  int d() const { return tkv_codec_head_dim(c); }
  size_t row_bytes() const { return tkv_codec_row_bytes(c); }
};

std::shared_ptr<Codec> make_codec(const std::string& format, int d, uint64_t seed) {
  auto h = std::make_shared<Codec>();
  check(tkv_codec_create(format.c_str(), d, seed, &h->c));
  return h;
}

// The output array: `out` when given (checked: dtype, shape, contiguity,
// writable), else a new one.
template <typename T>
py::array_t<T> output(const py::object& out, const std::vector<py::ssize_t>& shape, const std::string& expected) {
  if (out.is_none()) return new_array<T>(shape);
  std::vector<long> want(shape.begin(), shape.end());
  auto a = checked<T>(out, "out", want, expected);
  if (!a.writeable()) throw py::value_error("out must be writable");
  return a;
}

py::array_t<uint8_t> quantize(const Codec& c, const py::handle& obj, const py::object& out_obj) {
  const int d = c.d();
  auto x = checked<float>(obj, "x", {-1, d}, "float32[n, " + std::to_string(d) + "]");
  const size_t n = static_cast<size_t>(x.shape(0)), rb = c.row_bytes();
  auto out = output<uint8_t>(out_obj, {static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(rb)},
                             "uint8[" + std::to_string(n) + ", " + std::to_string(rb) + "]");
  const float* in = x.data();
  uint8_t* o = out.mutable_data();
  tkv_status s;
  {
    py::gil_scoped_release nogil;
    s = tkv_codec_quantize(c.c, in, n, o, n * rb);
  }
  check(s);
  return out;
}

py::array_t<float> dequantize(const Codec& c, const py::handle& obj, const py::object& out_obj) {
  const size_t rb = c.row_bytes();
  auto codes = checked<uint8_t>(obj, "codes", {-1, static_cast<long>(rb)}, "uint8[n, " + std::to_string(rb) + "]");
  const size_t n = static_cast<size_t>(codes.shape(0));
  const int d = c.d();
  auto out = output<float>(out_obj, {static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(d)},
                           "float32[" + std::to_string(n) + ", " + std::to_string(d) + "]");
  const uint8_t* in = codes.data();
  float* o = out.mutable_data();
  tkv_status s;
  {
    py::gil_scoped_release nogil;
    s = tkv_codec_dequantize(c.c, in, n, o, n * size_t(d));
  }
  check(s);
  return out;
}

py::array_t<float> codec_mean(const Codec& c) {
  py::array_t<float> m(c.d());
  check(tkv_codec_mean(c.c, m.mutable_data(), size_t(c.d())));
  return m;
}

std::shared_ptr<Codec> calibrate_rows(const py::handle& obj, const std::string& format) {
  auto x = checked<float>(obj, "rows", {-1, -1}, "float32[n, d]");
  auto h = std::make_shared<Codec>();
  const float* in = x.data();
  const size_t n = static_cast<size_t>(x.shape(0));
  const int d = static_cast<int>(x.shape(1));
  tkv_status s;
  {
    py::gil_scoped_release nogil;
    s = tkv_codec_calibrate(format.c_str(), d, in, n, &h->c);
  }
  check(s);
  return h;
}

py::dict codebook(int d, int bits) {
  if (bits < 1 || bits > 8) throw py::value_error("bits must be in [1, 8], got " + std::to_string(bits));
  const size_t k = size_t{1} << bits;
  py::array_t<double> c(static_cast<py::ssize_t>(k)), b(static_cast<py::ssize_t>(k - 1));
  double mse = 0;
  check(tkv_codebook(d, bits, c.mutable_data(), k, b.mutable_data(), k - 1, &mse));
  py::dict r;
  r["d"] = d;
  r["bits"] = bits;
  r["centroids"] = c;
  r["boundaries"] = b;
  r["mse_coord"] = mse;
  r["mse_vector"] = mse * d;
  return r;
}

// Keys (and values) as [heads, tokens, d] (or [tokens, d]: one head).
py::object kv_stats(const py::handle& keys, const py::handle& values, const py::object& formats, bool mean_center,
                    bool calibrated, int queries, uint64_t seed, const std::string& source) {
  std::string fl;
  if (py::isinstance<py::str>(formats)) {
    fl = formats.cast<std::string>();
  } else {
    for (const auto& f : formats) {
      if (!fl.empty()) fl += ',';
      fl += py::str(f).cast<std::string>();
    }
  }
  py::module_ json = py::module_::import("json");
  auto one = [&](const py::handle& obj, const std::string& what) -> py::object {
    const py::ssize_t nd = py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj).ndim() : 3;
    auto x = checked<float>(obj, what, nd == 2 ? std::vector<long>{-1, -1} : std::vector<long>{-1, -1, -1},
                            "float32[heads, tokens, d] (or [tokens, d])");
    const int heads = nd == 2 ? 1 : static_cast<int>(x.shape(0));
    const int tokens = static_cast<int>(x.shape(nd - 2)), d = static_cast<int>(x.shape(nd - 1));
    tkv_kv_stats_params p = tkv_kv_stats_default_params();
    p.formats = fl.c_str();
    const std::string src = source.empty() ? what : source;
    p.source = src.c_str();
    p.mean_center = mean_center;
    p.calibrated = calibrated;
    p.queries = queries;
    p.seed = seed;
    size_t len = 0;
    std::vector<char> buf(1 << 16);
    const float* in = x.data();
    tkv_status s;
    {
      py::gil_scoped_release nogil;
      s = tkv_kv_stats(in, heads, tokens, d, &p, buf.data(), buf.size(), &len);
      if (s == TKV_ERR_BUFFER && len + 1 > buf.size()) {
        buf.resize(len + 1);
        s = tkv_kv_stats(in, heads, tokens, d, &p, buf.data(), buf.size(), &len);
      }
    }
    check(s);
    return json.attr("loads")(py::str(buf.data(), len));
  };
  py::dict r;
  r["keys"] = one(keys, "keys");
  if (!values.is_none()) r["values"] = one(values, "values");
  return r;
}

// q: [n_q, n_q_heads, d]; codes: [n_kv, n_kv_heads, row_bytes].
py::array_t<float> attention(const py::handle& q_obj, const py::handle& k_obj, const py::handle& v_obj,
                             const Codec& kc, const Codec& vc, int causal_offset, float scale,
                             const py::object& mu_k, const py::object& mu_v, float sparse_v, int threads,
                             const std::string& keys) {
  const int d = kc.d();
  auto q = checked<float>(q_obj, "q", {-1, -1, d}, "float32[n_q, n_q_heads, " + std::to_string(d) + "]");
  auto k = checked<uint8_t>(k_obj, "k_codes", {-1, -1, static_cast<long>(kc.row_bytes())},
                            "uint8[n_kv, n_kv_heads, " + std::to_string(kc.row_bytes()) + "]");
  auto v = checked<uint8_t>(v_obj, "v_codes", {k.shape(0), k.shape(1), static_cast<long>(vc.row_bytes())},
                            "uint8[" + std::to_string(k.shape(0)) + ", " + std::to_string(k.shape(1)) + ", " +
                                std::to_string(vc.row_bytes()) + "] (as k_codes)");
  const long hkv = static_cast<long>(k.shape(1));
  py::array_t<float> muk, muv;
  if (!mu_k.is_none()) muk = checked<float>(mu_k, "mu_k", {hkv, d}, "float32[n_kv_heads, d]");
  if (!mu_v.is_none()) muv = checked<float>(mu_v, "mu_v", {hkv, d}, "float32[n_kv_heads, d]");
  tkv_attention_params p = tkv_attention_default_params();
  p.q = q.data();
  p.n_q = static_cast<int32_t>(q.shape(0));
  p.n_q_heads = static_cast<int32_t>(q.shape(1));
  p.n_kv = static_cast<int32_t>(k.shape(0));
  p.n_kv_heads = static_cast<int32_t>(hkv);
  p.head_dim = d;
  p.k_codec = kc.c;
  p.k_codes = k.data();
  p.k_codes_bytes = static_cast<size_t>(k.nbytes());
  p.v_codec = vc.c;
  p.v_codes = v.data();
  p.v_codes_bytes = static_cast<size_t>(v.nbytes());
  p.mu_k = mu_k.is_none() ? nullptr : muk.data();
  p.mu_v = mu_v.is_none() ? nullptr : muv.data();
  p.causal_offset = causal_offset;
  p.scale = scale;
  p.sparse_v = sparse_v;
  p.threads = threads;
  if (keys != "default" && keys != "exact" && keys != "int8")
    throw py::value_error("keys must be 'default', 'exact' or 'int8', not '" + keys + "'");
  p.key_scoring = keys == "exact" ? 1 : keys == "int8" ? 2 : 0;
  auto out = new_array<float>({q.shape(0), q.shape(1), static_cast<py::ssize_t>(d)});
  p.out = out.mutable_data();
  p.out_floats = static_cast<size_t>(out.size());
  tkv_status s;
  {
    py::gil_scoped_release nogil;
    s = tkv_attention(&p);
  }
  check(s);
  return out;
}


py::array_t<float> rotate(const py::handle& obj, uint64_t seed, bool inverse) {
  auto x = checked<float>(obj, "x", {-1, -1}, "float32[n, d]");
  const size_t n = static_cast<size_t>(x.shape(0));
  const int d = static_cast<int>(x.shape(1));
  auto out = new_array<float>({x.shape(0), x.shape(1)});
  const float* in = x.data();
  float* o = out.mutable_data();
  tkv_status s;
  {
    py::gil_scoped_release nogil;
    s = tkv_rotate(d, seed, in, n, inverse ? 1 : 0, o, n * size_t(d));
  }
  check(s);
  return out;
}

// A tkv_cache owned by Python (turbokv.torch.CompressedKVCache wraps it).
class Cache {
 public:
  Cache(int n_layer, int n_kv_heads, int head_dim, int capacity, const std::string& type_k,
        const std::string& type_v, const py::object& preset, const py::object& policy, bool mean_center,
        int mean_tokens, uint64_t seed)
      : type_k_(type_k), type_v_(type_v) {
    tkv_cache_params p = tkv_cache_default_params();
    p.n_layer = n_layer;
    p.n_kv_heads = n_kv_heads;
    p.head_dim = head_dim;
    p.capacity = capacity;
    p.type_k = type_k_.c_str();
    p.type_v = type_v_.c_str();
    if (!preset.is_none()) preset_ = preset.cast<std::string>();
    if (!policy.is_none()) policy_ = policy.cast<std::string>();
    p.preset = preset.is_none() ? nullptr : preset_.c_str();
    p.policy_path = policy.is_none() ? nullptr : policy_.c_str();
    p.mean_center = mean_center;
    p.mean_tokens = mean_tokens;
    p.seed = seed;
    check(tkv_cache_create(&p, &c_));
    hkv_ = n_kv_heads;
    d_ = head_dim;
  }
  ~Cache() { tkv_cache_free(c_); }
  Cache(const Cache&) = delete;

  void append(int layer, int pos, const py::handle& k_obj, const py::handle& v_obj) {
    const std::string shape = "float32[n, " + std::to_string(hkv_) + ", " + std::to_string(d_) + "]";
    auto k = checked<float>(k_obj, "k", {-1, hkv_, d_}, shape);
    auto v = checked<float>(v_obj, "v", {k.shape(0), hkv_, d_}, shape + " (as k)");
    const int n = static_cast<int>(k.shape(0));
    if (n == 0) return;
    const float* kp = k.data();
    const float* vp = v.data();
    tkv_status s;
    {
      py::gil_scoped_release nogil;
      s = tkv_cache_append(c_, layer, pos, n, kp, size_t(k.size()), vp, size_t(v.size()));
    }
    check(s);
  }

  py::array_t<float> attention(int layer, const py::handle& q_obj, int first_pos, float scale, int threads) const {
    auto q = checked<float>(q_obj, "q", {-1, -1, d_}, "float32[n_q, n_q_heads, " + std::to_string(d_) + "]");
    auto out = new_array<float>({q.shape(0), q.shape(1), static_cast<py::ssize_t>(d_)});
    const float* qp = q.data();
    float* o = out.mutable_data();
    const int n_q = static_cast<int>(q.shape(0)), hq = static_cast<int>(q.shape(1));
    tkv_status s;
    {
      py::gil_scoped_release nogil;
      s = tkv_cache_attention(c_, layer, qp, n_q, hq, first_pos, scale, threads, o, size_t(out.size()));
    }
    check(s);
    return out;
  }
  int layer_tokens(int layer) const { return tkv_cache_layer_tokens(c_, layer); }
  size_t nbytes() const { return tkv_cache_bytes(c_); }

 private:
  tkv_cache* c_ = nullptr;
  std::string type_k_, type_v_, preset_, policy_;
  long hkv_ = 0, d_ = 0;
};

}  // namespace

void bind_codec(py::module_& m) {
  py::class_<Codec, std::shared_ptr<Codec>>(m, "Codec",
                                            "A KV row format for one head dim: quantize float32 rows to bytes "
                                            "and back. Thread-safe (calls release the GIL).")
      .def(py::init(&make_codec), py::arg("format"), py::arg("d") = 128, py::arg("seed") = TKV_DEFAULT_SEED,
           "Codec('tq4', d=128): a format by name (f16, q8_0, q4_0, tq2..tq8, tq3.5, tq4-ip, ...)")
      .def_property_readonly("format", [](const Codec& c) { return std::string(tkv_codec_format(c.c)); })
      .def_property_readonly("d", &Codec::d)
      .def_property_readonly("row_bytes", &Codec::row_bytes)
      .def_property_readonly("bits_per_value", [](const Codec& c) { return tkv_codec_bits_per_value(c.c); })
      .def_property_readonly("mean", &codec_mean, "the fitted mean of a calibrated codec (else zeros)")
      .def("quantize", &quantize, py::arg("x"), py::arg("out") = py::none(),
           "float32[n, d] -> uint8[n, row_bytes] (into out, when given: no new array per call)")
      .def("dequantize", &dequantize, py::arg("codes"), py::arg("out") = py::none(),
           "uint8[n, row_bytes] -> float32[n, d] (into out, when given)")
      .def("__repr__", [](const Codec& c) {
        return "Codec('" + std::string(tkv_codec_format(c.c)) + "', d=" + std::to_string(c.d()) + ")";
      });
  m.def("calibrate", &calibrate_rows, py::arg("rows"), py::arg("format") = "tqc4",
        "Fits a calibrated codec (tqcB) to float32[n, d] rows of one head: it codes x - codec.mean.");
  m.def("codebook", &codebook, py::arg("d"), py::arg("bits"),
        "The Lloyd-Max codebook of a rotated unit vector's coordinate: centroids, boundaries, mse_coord.");
  m.def("kv_stats", &kv_stats, py::arg("keys"), py::arg("values") = py::none(), py::arg("formats") = "all",
        py::arg("mean_center") = true, py::arg("calibrated") = false, py::arg("queries") = 64,
        py::arg("seed") = TKV_DEFAULT_SEED, py::arg("source") = "",
        "Each format's error on float32[heads, tokens, d] keys (and values), as `turbokv kv-stats --json` "
        "reports it: {'keys': [...], 'values': [...]}, one dict per (format, centring).");
  m.def("attention", &attention, py::arg("q"), py::arg("k_codes"), py::arg("v_codes"), py::arg("k_codec"),
        py::arg("v_codec"), py::arg("causal_offset") = -1, py::arg("scale") = 0.0f, py::arg("mu_k") = py::none(),
        py::arg("mu_v") = py::none(), py::arg("sparse_v") = 0.0f, py::arg("threads") = 1, py::arg("keys") = "default",
        "softmax(q K^T scale) V on the codes: q float32[n_q, n_q_heads, d], codes uint8[n_kv, n_kv_heads, "
        "row_bytes] -> float32[n_q, n_q_heads, d]");
  m.def("rotate", &rotate, py::arg("x"), py::arg("seed") = TKV_DEFAULT_SEED, py::arg("inverse") = false,
        "The rotated formats' seeded orthogonal transform: float32[n, d] -> R x (or R^T x, inverse=True)");
  py::class_<Cache>(m, "_Cache", "A tkv_cache (use turbokv.torch.CompressedKVCache)")
      .def(py::init<int, int, int, int, const std::string&, const std::string&, const py::object&,
                    const py::object&, bool, int, uint64_t>(),
           py::arg("n_layer"), py::arg("n_kv_heads"), py::arg("head_dim"), py::arg("capacity"), py::arg("type_k"),
           py::arg("type_v"), py::arg("preset"), py::arg("policy"), py::arg("mean_center"),
           py::arg("mean_tokens"), py::arg("seed"))
      .def("append", &Cache::append, py::arg("layer"), py::arg("pos"), py::arg("k"), py::arg("v"))
      .def("attention", &Cache::attention, py::arg("layer"), py::arg("q"), py::arg("first_pos"),
           py::arg("scale"), py::arg("threads"))
      .def("layer_tokens", &Cache::layer_tokens, py::arg("layer"))
      .def_property_readonly("nbytes", &Cache::nbytes);
}

}  // namespace tkv_py

PYBIND11_MODULE(_turbokv, m) {
  m.doc() = "turbokv's compiled core over the C API (import turbokv, not this)";
  m.attr("__version__") = tkv_version();
  m.attr("DEFAULT_SEED") = pybind11::int_(TKV_DEFAULT_SEED);
  tkv_py::bind_codec(m);
  tkv_py::bind_model(m);
}
