// Shared by the CUDA sources: errors as Status, device buffers, the thread
// context of the flat row programs, and a codec's flat formats on the device.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "codec/flat_format.h"
#include "codec/flat_kernels.h"
#include "util/status.h"

namespace tkv::cuda {

inline Status cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
#define TKV_CUDA_TRY(expr)                                    \
  do {                                                        \
    ::tkv::Status tkv_s_ = ::tkv::cuda::cuda_check((expr), #expr); \
    if (!tkv_s_.ok()) return tkv_s_;                          \
  } while (0)
#define TKV_TRY(expr)                  \
  do {                                 \
    ::tkv::Status tkv_s_ = (expr);     \
    if (!tkv_s_.ok()) return tkv_s_;   \
  } while (0)

// Device memory, freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { release(); p_ = o.p_; n_ = o.n_; o.p_ = nullptr; o.n_ = 0; }
    return *this;
  }
  ~DeviceBuffer() { release(); }
  Status alloc(size_t bytes) {
    release();
    if (bytes == 0) bytes = 1;
    TKV_CUDA_TRY(cudaMalloc(&p_, bytes));
    n_ = bytes;
    return Status::Ok();
  }
  Status upload(const void* src, size_t bytes) {
    TKV_TRY(alloc(bytes));
    if (bytes) TKV_CUDA_TRY(cudaMemcpy(p_, src, bytes, cudaMemcpyHostToDevice));
    return Status::Ok();
  }
  Status download(void* dst, size_t bytes) const {
    if (bytes) TKV_CUDA_TRY(cudaMemcpy(dst, p_, bytes, cudaMemcpyDeviceToHost));
    return Status::Ok();
  }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }

 private:
  void release() { if (p_) cudaFree(p_); p_ = nullptr; n_ = 0; }
  void* p_ = nullptr;
  size_t n_ = 0;
};

// A thread block running a flat row program.
struct BlockCtx {
  int tid, nt;
  __device__ void sync() const { __syncthreads(); }
  __device__ void flag(int* where, int v) const { atomicOr(where, v); }
};

// One flat format per KV head (one entry when every head shares a codec) and
// their tables, on the device.
struct DeviceFormats {
  std::vector<FlatFormat> host;
  std::vector<float> tables;
  DeviceBuffer formats, table;
  int count = 0;
  Status build(const Codec* const* heads, const Codec* codec, int n_heads) {
    host.clear();
    tables.clear();
    for (int h = 0; h < (heads ? n_heads : 1); ++h) {
      auto f = flatten_codec(heads ? *heads[h] : *codec, tables);
      if (!f) return Status::Error("CUDA: " + f.error());
      host.push_back(*f);
    }
    count = static_cast<int>(host.size());
    if (tables.empty()) tables.push_back(0.0f);
    TKV_TRY(formats.upload(host.data(), sizeof(FlatFormat) * host.size()));
    return table.upload(tables.data(), sizeof(float) * tables.size());
  }
  const FlatFormat* dev() const { return formats.as<const FlatFormat>(); }
  const float* tab() const { return table.as<const float>(); }
};

// Launches the quantize kernel over n token-major rows (row r's format is
// formats[r % count]); returns the first bad row and its RowStatus in *bad
// (row << 8 | status; ~0 when every row was written).
Status launch_quantize(const DeviceFormats& f, const float* x, size_t n, uint8_t* out, unsigned long long* bad_dev,
                       cudaStream_t stream);

}  // namespace tkv::cuda
