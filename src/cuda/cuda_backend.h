// cuda/: the codec and fused attention on NVIDIA GPUs, beside attention/.
// It sees util/, codec/ and attention/ only.
//
// The CUDA backend: the codec's quantizer and the fused attention on an
// NVIDIA GPU (docs/ARCHITECTURE.md, "CUDA"). This header has no CUDA types,
// so every layer above can call it; in a build without nvcc (cuda_off.cpp)
// every function fails with a message that says so, and available() is false.
//
// Quantization runs the codec's flat row programs (codec/flat_kernels.h), one
// thread block per row: the bytes equal the CPU codec's. Attention reads the
// codes in place (split over the context, every query head of a GQA group
// from one read of each row, online softmax, log-sum-exp merge of the
// splits, mean vectors, any K and V formats, paged block tables).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "attention/attention.h"
#include "codec/format.h"
#include "util/status.h"

namespace tkv::cuda {

// True when this build has the backend and a CUDA device answers; otherwise
// false with the reason in *why (no nvcc at configure time, no driver, no
// device).
bool available(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  size_t memory_bytes = 0;
};
Expected<DeviceInfo> device_info();

// Quantizes n rows of d = codec.dim() floats on the GPU into n * row_bytes
// bytes (host buffers in and out). Errors as Codec::quantize's: the first bad
// row is named and nothing after it is meaningful.
Status quantize(const Codec& codec, const float* x, size_t n, uint8_t* out);

// tkv::attention on the GPU for host-resident arguments: rows, block table,
// queries and means are uploaded, out (and lse) downloaded. Same contract as
// the CPU kernel (attention.h) but sparse_v must be 0 and the head dim at
// most 256, the GQA group at most 16.
Status attention(const AttentionArgs& a);

// Benchmark support (turbokv bench-attn --device cuda): uploads a's rows and
// queries once, then times calls of the attention kernels with CUDA events
// until min_seconds have passed (at least 3); returns the median ms per call.
// With k_src/v_src (n_kv * n_kv_heads rows of floats, token-major), each
// timed call first quantizes them on the GPU into fresh rows, as a prefill
// writes the cache.
Expected<double> time_attention(const AttentionArgs& a, const float* k_src, const float* v_src, double min_seconds);

// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes
// written (the ceiling of a kernel that streams the cache).
Expected<double> copy_bandwidth_gbs();

}  // namespace tkv::cuda
