#include "gguf/quantize_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/weight_blocks.h"
#include "util/fp16.h"
#include "util/llama_blocks.h"

namespace tkv {
namespace {

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
int clampi(long v, int lo, int hi) { return static_cast<int>(std::min<long>(hi, std::max<long>(lo, v))); }

// Q4_1 / Q5_1: x = d*q + m with q in [0, 2^bits).
void q_min(const float* x, uint8_t* blk, int bits) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) { lo = std::min(lo, x[j]); hi = std::max(hi, x[j]); }
  const int qmax = (1 << bits) - 1;
  put_half(blk, (hi - lo) / qmax);
  put_half(blk + 2, lo);
  const float d = get_half(blk), m = get_half(blk + 2);
  const float id = recip_or_zero(d);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = clampi(std::lround((x[j] - m) * id), 0, qmax);
  uint8_t* qs = blk + (bits == 5 ? 8 : 4);
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      qh |= uint32_t((q[j] >> 4) & 1) << j;
      qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
    }
    std::memcpy(blk + 4, &qh, 4);
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

// Q5_0: x = d*(q - 16).
void q5_0(const float* x, uint8_t* blk) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
  put_half(blk, max / -16);
  const float d = get_half(blk), id = d != 0 ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = clampi(std::lround(x[j] * id) + 16, 0, 31);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(blk + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) blk[6 + j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

// Q4_K / Q5_K super-block: 8 sub-blocks of 32, y = d*sc*q - dmin*m.
void qk_min(const float* x, uint8_t* blk, int bits) {
  const int qmax = (1 << bits) - 1;
  float scale[8], mins[8];
  for (int s = 0; s < 8; ++s) {
    float lo = 0, hi = 0;  // include 0 so mins stay >= 0
    for (int l = 0; l < 32; ++l) { lo = std::min(lo, x[32 * s + l]); hi = std::max(hi, x[32 * s + l]); }
    scale[s] = (hi - lo) / qmax;
    mins[s] = -lo;
  }
  const float smax = *std::max_element(scale, scale + 8), mmax = *std::max_element(mins, mins + 8);
  put_half(blk, smax / 63);
  put_half(blk + 2, mmax / 63);
  const float d = get_half(blk), dmin = get_half(blk + 2);
  int sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? clampi(std::lround(scale[s] / d), 0, 63) : 0;
    mn[s] = dmin > 0 ? clampi(std::lround(mins[s] / dmin), 0, 63) : 0;
  }
  uint8_t* S = blk + 4;
  for (int j = 0; j < 4; ++j) {
    S[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    S[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    S[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  int q[256];
  for (int s = 0; s < 8; ++s) {
    const float ds = d * sc[s], ms = dmin * mn[s];
    for (int l = 0; l < 32; ++l)
      q[32 * s + l] = ds > 0 ? clampi(std::lround((x[32 * s + l] + ms) / ds), 0, qmax) : 0;
  }
  uint8_t* qh = blk + 16;
  uint8_t* qs = blk + (bits == 5 ? 48 : 16);
  if (bits == 5) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int a = q[64 * c + l], b = q[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((a & 15) | ((b & 15) << 4));
      if (bits == 5) qh[l] |= static_cast<uint8_t>((((a >> 4) & 1) << (2 * c)) | (((b >> 4) & 1) << (2 * c + 1)));
    }
}

// Q6_K: 16 sub-blocks of 16 with int8 scales, y = d*sc*(q - 32).
void q6_k(const float* x, uint8_t* blk) {
  float scale[16];
  for (int s = 0; s < 16; ++s) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
    scale[s] = amax / 31;
  }
  const float smax = *std::max_element(scale, scale + 16);
  put_half(blk + 208, smax / 127);
  const float d = get_half(blk + 208);
  int8_t* sc = reinterpret_cast<int8_t*>(blk + 192);
  int q[256];
  for (int s = 0; s < 16; ++s) {
    sc[s] = static_cast<int8_t>(d > 0 ? clampi(std::lround(scale[s] / d), -128, 127) : 0);
    const float ds = d * sc[s];
    for (int l = 0; l < 16; ++l) q[16 * s + l] = ds > 0 ? clampi(std::lround(x[16 * s + l] / ds) + 32, 0, 63) : 32;
  }
  uint8_t* ql = blk;
  uint8_t* qh = blk + 128;
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      const int q1 = q[n + l], q2 = q[n + l + 32], q3 = q[n + l + 64], q4 = q[n + l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
      ql[l + 32] = static_cast<uint8_t>((q2 & 15) | ((q4 & 15) << 4));
      qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
}

// MXFP4 as llama.cpp's quantize_row_mxfp4_ref: the exponent from the block's
// largest magnitude (floor(log2 amax) - 2 + 127), each value the nearest of
// the 16 codes (the first on ties).
void mxfp4(const float* x, uint8_t* blk) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : 0;
  const float d = mxfp4_scale(e);
  blk[0] = e;
  auto best = [&](float v) {
    int bi = 0;
    float be = std::fabs(kMxfp4[0] * d - v);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(kMxfp4[i] * d - v);
      if (err < be) {
        bi = i;
        be = err;
      }
    }
    return bi;
  };
  for (int j = 0; j < 16; ++j) blk[1 + j] = static_cast<uint8_t>(best(x[j]) | (best(x[j + 16]) << 4));
}

}  // namespace

bool quantize_weight_row(const std::string& type, const float* x, int64_t cols, uint8_t* out) {
  if (type == "Q8_0") { llama_quantize_q8_0(x, static_cast<int>(cols / 32), out); return true; }
  if (type == "Q4_0") { llama_quantize_q4_0(x, static_cast<int>(cols / 32), out); return true; }
  if (type == "Q4_1") { for (int64_t b = 0; b < cols / 32; ++b) q_min(x + 32 * b, out + 20 * b, 4); return true; }
  if (type == "Q5_1") { for (int64_t b = 0; b < cols / 32; ++b) q_min(x + 32 * b, out + 24 * b, 5); return true; }
  if (type == "Q5_0") { for (int64_t b = 0; b < cols / 32; ++b) q5_0(x + 32 * b, out + 22 * b); return true; }
  if (type == "Q4_K") { for (int64_t b = 0; b < cols / 256; ++b) qk_min(x + 256 * b, out + 144 * b, 4); return true; }
  if (type == "Q5_K") { for (int64_t b = 0; b < cols / 256; ++b) qk_min(x + 256 * b, out + 176 * b, 5); return true; }
  if (type == "Q6_K") { for (int64_t b = 0; b < cols / 256; ++b) q6_k(x + 256 * b, out + 210 * b); return true; }
  if (type == "MXFP4") { for (int64_t b = 0; b < cols / 32; ++b) mxfp4(x + 32 * b, out + 17 * b); return true; }
  return false;
}

}  // namespace tkv
