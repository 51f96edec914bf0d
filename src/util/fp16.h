// Half-precision conversions used by the formats: IEEE fp16 (q8_0/q4_0 scales,
// the f16 format), bf16, and the unsigned e6m10 float used for tq norms.
// All are bit-exact, round-to-nearest-even, and identical on every platform.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "util/hd.h"

// Rows are written with memcpy of native integers: the byte layouts in
// docs/FORMATS.md are little-endian, so only little-endian hosts are supported.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "turbokv formats are little-endian");

namespace tkv {

// 1/d, or 0 when d is 0 or so small (|d| < 2^-128, subnormal) that 1/d
// overflows: a scale's inverse. Every value of such a block or row then codes
// as 0, where inf would have made 0 * inf = NaN codes (a block of subnormals
// in a KV file found this; ggml's q8_0/q4_0 arithmetic, which this matches
// everywhere else, has the same hole).
TKV_HD inline float recip_or_zero(float d) {
  const float r = d != 0.0f ? 1.0f / d : 0.0f;
  return r - r == 0.0f ? r : 0.0f;  // finite (inf - inf and NaN - NaN are NaN)
}

TKV_HD inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
TKV_HD inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// IEEE binary16, round to nearest even; overflow to +-inf, NaN kept as NaN.
TKV_HD inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // Scale into the subnormal range by adding 0.5 (2^-1): the FPU does the rounding.
    float r = bits_f32(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (f32_bits(r) - 0x3f000000u));
  }
  uint32_t mant_odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (ax >> 13));
}

TKV_HD inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return bits_f32(f32_bits(v) | sign);
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

TKV_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
TKV_HD inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// Norm storage: an unsigned float with 6 exponent bits and 10 mantissa bits
// (fp16 precision, no sign bit since norms are >= 0). Range 2^-31 .. 2^32
// (about 4.7e-10 .. 4.29e9) instead of fp16's 6e-5 .. 65504, so norms of 1e-6
// and 1e6 keep 11 significant bits. 0 encodes exactly 0; smaller values flush to 0.
constexpr uint32_t kUNormExpBias = 127 - 32;  // float exponent of code exponent 0
constexpr float kUNormMax = 4.29e9f;           // below the largest code (2^32 - 2^21)
TKV_HD inline uint16_t f32_to_unorm16(float n) {      // n finite, >= 0, < kUNormMax
  uint32_t x = f32_bits(n);
  if (x < ((kUNormExpBias + 1) << 23)) return 0;  // below 2^-31: zero
  x += 0xfffu + ((x >> 13) & 1u);                 // round to 10 mantissa bits
  uint32_t code = (x >> 13) - (kUNormExpBias << 10);
  return static_cast<uint16_t>(code > 0xffffu ? 0xffffu : code);
}
TKV_HD inline float unorm16_to_f32(uint16_t c) {
  if (c == 0) return 0.0f;
  return bits_f32((static_cast<uint32_t>(c) + (kUNormExpBias << 10)) << 13);
}

}  // namespace tkv
