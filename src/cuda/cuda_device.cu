// Device discovery and the copy-bandwidth ceiling of the CUDA backend.
#include <algorithm>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

namespace tkv::cuda {

bool available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorInsufficientDriver) {
    if (why) *why = "no NVIDIA driver on this machine, or one older than this build's CUDA runtime needs";
    return false;
  }
  if (e != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device on this machine";
    return false;
  }
  return true;
}

Expected<DeviceInfo> device_info() {
  std::string why;
  if (!available(&why)) return Status::Error(why);
  int dev = 0;
  TKV_CUDA_TRY(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  TKV_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo d;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.memory_bytes = prop.totalGlobalMem;
  return d;
}

Expected<double> copy_bandwidth_gbs() {
  const size_t bytes = size_t(1) << 30;  // far beyond any L2
  DeviceBuffer a, b;
  TKV_TRY(a.alloc(bytes));
  TKV_TRY(b.alloc(bytes));
  TKV_CUDA_TRY(cudaMemset(a.as<void>(), 1, bytes));
  cudaEvent_t e0, e1;
  TKV_CUDA_TRY(cudaEventCreate(&e0));
  TKV_CUDA_TRY(cudaEventCreate(&e1));
  std::vector<float> ms;
  Status s = cuda_check(cudaMemcpy(b.as<void>(), a.as<void>(), bytes, cudaMemcpyDeviceToDevice), "copy");
  for (int i = 0; s.ok() && i < 10; ++i) {
    cudaEventRecord(e0);
    s = cuda_check(cudaMemcpyAsync(b.as<void>(), a.as<void>(), bytes, cudaMemcpyDeviceToDevice), "copy");
    cudaEventRecord(e1);
    float t = 0;
    if (s.ok()) s = cuda_check(cudaEventSynchronize(e1), "copy timing");
    if (s.ok()) s = cuda_check(cudaEventElapsedTime(&t, e0, e1), "copy timing");
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (!s.ok()) return s;
  std::sort(ms.begin(), ms.end());
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;  // read + write
}

}  // namespace tkv::cuda
