// Quantization on the GPU: one thread block per row runs the codec's flat row
// program (codec/flat_kernels.h), so the bytes equal the CPU codec's. This
// file is compiled with --fmad=false as the codec is with -ffp-contract=off.
#include <climits>
#include <cmath>
#include <sstream>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

namespace tkv::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
quantize_rows_kernel(const FlatFormat* formats, int nformats, const float* tables, const float* x, size_t n,
                     uint8_t* out, unsigned long long* bad) {
  __shared__ flat::RowScratch s;
  __shared__ FlatFormat f;
  const BlockCtx c{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  for (size_t r = blockIdx.x; r < n; r += gridDim.x) {
    if (threadIdx.x == 0) f = formats[r % nformats];
    __syncthreads();
    const int st = flat::quantize_row(c, f, tables, x + r * f.d, out + r * f.row_bytes, s);
    if (st != flat::kRowOk && threadIdx.x == 0) atomicMin(bad, (static_cast<unsigned long long>(r) << 8) | st);
    __syncthreads();  // f and s are rewritten for the next row
  }
}

std::string row_error(const Codec& codec, const float* x, size_t row, int st) {
  std::ostringstream os;
  os << codec.name() << ": row " << row << ": ";
  const float* v = x + row * codec.dim();
  if (st & flat::kRowNonFinite) {
    for (int i = 0; i < codec.dim(); ++i)
      if (!std::isfinite(v[i])) { os << "element " << i << " is " << v[i] << " (NaN or Inf cannot be stored)"; break; }
  } else if (st & flat::kRowValueRange) {
    os << "a value overflows " << codec.name();
  } else if (st & flat::kRowScaleOverflow) {
    os << "a block's max |x| overflows the f16 scale of " << codec.name();
  } else {
    os << "the row's norm exceeds the " << codec.name() << " norm range (4.29e9)";
  }
  return os.str();
}

}  // namespace

Status launch_quantize(const DeviceFormats& f, const float* x, size_t n, uint8_t* out, unsigned long long* bad,
                       cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  const unsigned blocks = static_cast<unsigned>(n < 65536 ? n : 65536);
  quantize_rows_kernel<<<blocks, kThreads, 0, stream>>>(f.dev(), f.count, f.tab(), x, n, out, bad);
  return cuda_check(cudaGetLastError(), "quantize kernel launch");
}

Status quantize(const Codec& codec, const float* x, size_t n, uint8_t* out) {
  DeviceFormats f;
  TKV_TRY(f.build(nullptr, &codec, 1));
  DeviceBuffer dx, dout, dbad;
  const unsigned long long none = ~0ull;
  TKV_TRY(dx.upload(x, sizeof(float) * n * codec.dim()));
  TKV_TRY(dout.alloc(n * codec.row_bytes()));
  TKV_TRY(dbad.upload(&none, sizeof(none)));
  TKV_TRY(launch_quantize(f, dx.as<float>(), n, dout.as<uint8_t>(), dbad.as<unsigned long long>(), 0));
  TKV_CUDA_TRY(cudaDeviceSynchronize());
  unsigned long long bad = none;
  TKV_TRY(dbad.download(&bad, sizeof(bad)));
  const size_t good = bad == none ? n : static_cast<size_t>(bad >> 8);
  TKV_TRY(dout.download(out, good * codec.row_bytes()));  // rows before a bad one are written
  if (bad != none) return Status::Error(row_error(codec, x, good, static_cast<int>(bad & 0xff)));
  return Status::Ok();
}

}  // namespace tkv::cuda
