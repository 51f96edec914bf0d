// The CUDA backend's functions in a build without nvcc: each fails and says
// how to get a build that has it (cuda_backend.h).
#include "cuda/cuda_backend.h"

namespace tkv::cuda {
namespace {
const char* kWhy =
    "this turbokv was built without CUDA (CMake found no nvcc: install the CUDA toolkit, or pass "
    "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc, and rebuild)";
}

bool available(std::string* why) {
  if (why) *why = kWhy;
  return false;
}
Expected<DeviceInfo> device_info() { return Status::Error(kWhy); }
Status quantize(const Codec&, const float*, size_t, uint8_t*) { return Status::Error(kWhy); }
Status attention(const AttentionArgs&) { return Status::Error(kWhy); }
Expected<double> time_attention(const AttentionArgs&, const float*, const float*, double) {
  return Status::Error(kWhy);
}
Expected<double> copy_bandwidth_gbs() { return Status::Error(kWhy); }

}  // namespace tkv::cuda
