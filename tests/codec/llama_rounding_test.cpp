// q4_0 and q8_0 byte for byte with llama.cpp on inputs built to land on
// their rounding boundaries. The reference here is ggml's
// quantize_row_q4_0_ref / quantize_row_q8_0_ref arithmetic written out step
// by step (each product and sum rounded to float, as that C code does on a
// compiler that does not contract them): a SIMD kernel that fuses x·id + 8.5
// into one FMA (GCC contracts Mul+Add by default in C++) truncates a few
// values differently: 3-6 codes in 50,688 on the Qwen3.5 key and value files,
// before -ffp-contract=off on the codec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "codec/format.h"
#include "util/fp16.h"
#include "util/rng.h"
#include "util/simd_targets.h"
#include "simd_guard.h"

namespace tkv {
namespace {

// ggml's arithmetic; volatile keeps every step rounded to float.
void ggml_q4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) { amax = std::fabs(x[j]); max = x[j]; }
  volatile float d = max / -8;
  volatile float id = d ? 1.0f / d : 0.0f;
  const uint16_t h = f32_to_f16(d);
  std::memcpy(out, &h, 2);
  for (int j = 0; j < 16; ++j) {
    volatile float x0 = x[j] * id, x1 = x[16 + j] * id;
    volatile float a = x0 + 8.5f, b = x1 + 8.5f;
    const uint8_t q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(a))));
    const uint8_t q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(b))));
    out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void ggml_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  volatile float d = amax / ((1 << 7) - 1);
  volatile float id = d ? 1.0f / d : 0.0f;
  const uint16_t h = f32_to_f16(d);
  std::memcpy(out, &h, 2);
  for (int j = 0; j < 32; ++j) {
    volatile float x0 = x[j] * id;
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x0)));
  }
}

// Blocks whose every value sits on a q4_0 boundary: the rounded and the fused
// x·id + 8.5 truncate to different codes.
std::vector<float> q4_boundary_blocks(int blocks, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x;
  while (static_cast<int>(x.size()) < blocks * 32) {
    const float max = -(1.0f + static_cast<float>(rng.uniform()) * 3.0f);  // largest magnitude, first
    const float d = max / -8, id = 1.0f / d;
    std::vector<float> b{max};
    for (int tries = 0; b.size() < 32 && tries < 2000000; ++tries) {
      // Near a code boundary: x·id + 8.5 close to an integer k.
      const int k = 1 + static_cast<int>(rng.next() % 15);
      const float target = (static_cast<float>(k) - 8.5f) / id;
      const float v = std::nextafter(target, (rng.next() & 1) ? 1e9f : -1e9f);
      if (std::fabs(v) >= std::fabs(max)) continue;
      volatile float p = v * id;
      volatile float s = p + 8.5f;
      const float fused = std::fma(v, id, 8.5f);
      if (static_cast<int>(s) != static_cast<int>(fused)) b.push_back(v);
    }
    if (b.size() < 32) continue;
    x.insert(x.end(), b.begin(), b.end());
  }
  return x;
}

// Blocks whose values sit at k + 0.5 (and one ulp off) after scaling by id.
std::vector<float> q8_boundary_blocks(int blocks, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x;
  for (int b = 0; b < blocks; ++b) {
    const float amax = 0.5f + static_cast<float>(rng.uniform()) * 4.0f;
    const float d = amax / 127, id = 1.0f / d;
    x.push_back(amax);
    for (int j = 1; j < 32; ++j) {
      const float k = static_cast<float>(static_cast<int>(rng.next() % 250) - 125) + 0.5f;
      float v = k / id;
      const int step = static_cast<int>(rng.next() % 3) - 1;  // one ulp below, on, above
      if (step) v = std::nextafter(v, step * 1e9f);
      x.push_back(v);
    }
  }
  return x;
}

void expect_ggml_bytes(const char* format, const std::vector<float>& x, void (*ref)(const float*, uint8_t*)) {
  const int d = 256, rows = static_cast<int>(x.size()) / d;
  ASSERT_GT(rows, 0);
  std::vector<uint8_t> want;
  const size_t block = std::string(format) == "q4_0" ? 18 : 34;
  want.resize(x.size() / 32 * block);
  for (size_t b = 0; b < x.size() / 32; ++b) ref(&x[b * 32], &want[b * block]);
  {  // the scalar reference, the specification the SIMD kernels follow
    auto c = make_codec(format, d);
    ASSERT_TRUE(c.ok());
    std::vector<uint8_t> got((*c)->row_bytes() * rows);
    ASSERT_TRUE((*c)->quantize(x.data(), rows, got.data(), Impl::kRef).ok());
    int diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
    EXPECT_EQ(diff, 0) << format << " reference: bytes differ from ggml's arithmetic";
  }
  TargetGuard guard;
  for (const auto& t : simd_targets()) {
    simd_force_target(t.bit);
    auto c = make_codec(format, d);
    ASSERT_TRUE(c.ok());
    std::vector<uint8_t> got((*c)->row_bytes() * rows);
    ASSERT_TRUE((*c)->quantize(x.data(), rows, got.data()).ok());
    int diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
    EXPECT_EQ(diff, 0) << format << " on " << t.name << ": bytes differ from ggml's arithmetic";
  }
}

TEST(LlamaRounding, Q4_0MatchesGgmlOnCodeBoundaries) {
  const auto x = q4_boundary_blocks(8 * 8, 3);  // 8 rows of d = 256
  // The inputs are what they claim: fused and rounded arithmetic disagree on each value but the block's max.
  int boundary = 0;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float id = 1.0f / (x[b * 32] / -8);
    for (int j = 1; j < 32; ++j) {
      volatile float p = x[b * 32 + j] * id;
      volatile float s = p + 8.5f;
      boundary += static_cast<int>(s) != static_cast<int>(std::fma(x[b * 32 + j], id, 8.5f));
    }
  }
  EXPECT_EQ(boundary, static_cast<int>(x.size() / 32 * 31));
  expect_ggml_bytes("q4_0", x, ggml_q4_0);
}

TEST(LlamaRounding, Q8_0MatchesGgmlOnHalfwayValues) {
  expect_ggml_bytes("q8_0", q8_boundary_blocks(8 * 8, 4), ggml_q8_0);
}

}  // namespace
}  // namespace tkv
