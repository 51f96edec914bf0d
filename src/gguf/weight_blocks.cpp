#include "gguf/weight_blocks.h"

#include <cmath>
#include <cstring>

#include "util/fp16.h"

namespace tkv {

const int8_t kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float mxfp4_scale(uint8_t e) { return std::ldexp(1.0f, int(e) - 128); }

namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// ggml's block layouts (llama.cpp ggml-quants.c), `cols` values from `row`.
void dequantize_blocks(uint32_t type, const uint8_t* row, int64_t cols, float* out) {
  switch (type) {
    case 0: std::memcpy(out, row, sizeof(float) * cols); return;
    case 1: case 30:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, row + 2 * c, 2);
        out[c] = type == 1 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case 2: case 3: case 6: case 7: case 8: {  // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
      const int64_t bb = weight_block_bytes(type);
      for (int64_t b = 0; b < cols / 32; ++b, out += 32) {
        const uint8_t* blk = row + b * bb;
        const float d = half(blk);
        if (type == 8) {
          for (int j = 0; j < 32; ++j) out[j] = static_cast<int8_t>(blk[2 + j]) * d;
        } else if (type == 2) {
          for (int j = 0; j < 16; ++j) {
            out[j] = ((blk[2 + j] & 15) - 8) * d;
            out[j + 16] = ((blk[2 + j] >> 4) - 8) * d;
          }
        } else if (type == 3) {
          const float m = half(blk + 2);
          for (int j = 0; j < 16; ++j) {
            out[j] = (blk[4 + j] & 15) * d + m;
            out[j + 16] = (blk[4 + j] >> 4) * d + m;
          }
        } else {
          const bool q51 = type == 7;
          const float m = q51 ? half(blk + 2) : 0.0f;
          const uint8_t* qhp = blk + (q51 ? 4 : 2);
          const uint8_t* qs = qhp + 4;
          uint32_t qh;
          std::memcpy(&qh, qhp, 4);
          for (int j = 0; j < 16; ++j) {
            const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
            const int x0 = (qs[j] & 15) | h0, x1 = (qs[j] >> 4) | h1;
            out[j] = q51 ? x0 * d + m : (x0 - 16) * d;
            out[j + 16] = q51 ? x1 * d + m : (x1 - 16) * d;
          }
        }
      }
      return;
    }
    case 12: case 13: {  // Q4_K, Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins
      const bool q5 = type == 13;
      const int64_t bb = q5 ? 176 : 144;
      for (int64_t b = 0; b < cols / 256; ++b) {
        const uint8_t* blk = row + b * bb;
        const float d = half(blk), dmin = half(blk + 2);
        const uint8_t* sc = blk + 4;
        const uint8_t* qh = blk + 16;
        const uint8_t* q = blk + (q5 ? 48 : 16);
        int u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32, u1 <<= 2, u2 <<= 2) {
          int s1, m1, s2, m2;
          scale_min_k4(is, sc, s1, m1);
          scale_min_k4(is + 1, sc, s2, m2);
          for (int l = 0; l < 32; ++l) {
            const int h1 = q5 && (qh[l] & u1) ? 16 : 0;
            *out++ = d * s1 * ((q[l] & 0xF) + h1) - dmin * m1;
          }
          for (int l = 0; l < 32; ++l) {
            const int h2 = q5 && (qh[l] & u2) ? 16 : 0;
            *out++ = d * s2 * ((q[l] >> 4) + h2) - dmin * m2;
          }
        }
      }
      return;
    }
    case kMxfp4Type: {
      for (int64_t b = 0; b < cols / 32; ++b, out += 32) {
        const uint8_t* blk = row + b * 17;
        const float d = mxfp4_scale(blk[0]);
        for (int j = 0; j < 16; ++j) {
          out[j] = kMxfp4[blk[1 + j] & 15] * d;
          out[j + 16] = kMxfp4[blk[1 + j] >> 4] * d;
        }
      }
      return;
    }
    case 14: {  // Q6_K
      for (int64_t b = 0; b < cols / 256; ++b) {
        const uint8_t* blk = row + b * 210;
        const uint8_t* ql = blk;
        const uint8_t* qh = blk + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
        const float d = half(blk + 208);
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, out += 128)
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            out[l] = d * sc[is] * (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            out[l + 32] = d * sc[is + 2] * (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            out[l + 64] = d * sc[is + 4] * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            out[l + 96] = d * sc[is + 6] * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
          }
      }
      return;
    }
    default: return;
  }
}

}  // namespace

void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

int weight_block_values(uint32_t type) {
  switch (type) {
    case 0: case 1: case 30: return 1;
    case 2: case 3: case 6: case 7: case 8: case kMxfp4Type: return 32;
    case 12: case 13: case 14: return 256;
    default: return 0;
  }
}

int weight_block_bytes(uint32_t type) {
  switch (type) {
    case 0: return 4;
    case 1: case 30: return 2;
    case 2: return 18;
    case 3: return 20;
    case 6: return 22;
    case 7: return 24;
    case 8: return 34;
    case 12: return 144;
    case 13: return 176;
    case 14: return 210;
    case kMxfp4Type: return 17;
    default: return 0;
  }
}

void unpack_f32(uint32_t type, const uint8_t* row, int64_t k0, int64_t n, float* out) {
  const int bv = weight_block_values(type);
  dequantize_blocks(type, row + k0 / bv * weight_block_bytes(type), n, out);
}

bool has_u8_unpack(uint32_t type) {
  return type == 8 || type == 2 || type == 3 || type == 6 || type == 7 || type == 12 || type == 13 ||
         type == kMxfp4Type;
}

void unpack_u8_scales(uint32_t type, const uint8_t* row, int64_t j, float* d, float* m) {
  if (type == 12 || type == 13) {
    const uint8_t* blk = row + (j / 8) * (type == 13 ? 176 : 144);
    int s, mm;
    scale_min_k4(static_cast<int>(j % 8), blk + 4, s, mm);
    // The float dequantizer computes d * s * q - dmin * m, left to right.
    *d = half(blk) * s;
    *m = -(half(blk + 2) * mm);
    return;
  }
  if (type == kMxfp4Type) {  // codes kMxfp4 + 12 in 0..24: value = d * u - 12 d exactly
    *d = mxfp4_scale(row[j * 17]);
    *m = -12.0f * *d;
    return;
  }
  const uint8_t* blk = row + j * weight_block_bytes(type);
  const float dd = half(blk);
  *d = dd;
  switch (type) {
    case 8: case 2: *m = u8_offset_per_scale(type) * dd; return;
    case 3: *m = half(blk + 2); return;
    case 6: case 7: *m = type == 7 ? half(blk + 2) : -16.0f * dd; return;
    default: *m = 0.0f; return;
  }
}

void unpack_k4_scales8(const uint8_t* blk, float* d, float* m) {
  const float dd = half(blk), dmin = half(blk + 2);
  for (int j = 0; j < 8; ++j) {
    int s, mm;
    scale_min_k4(j, blk + 4, s, mm);
    d[j] = dd * s;
    m[j] = -(dmin * mm);
  }
}

void unpack_u8(uint32_t type, const uint8_t* row, int64_t j, uint8_t* u, float* d, float* m) {
  unpack_u8_scales(type, row, j, d, m);
  if (type == 12 || type == 13) {
    const bool q5 = type == 13;
    const uint8_t* blk = row + (j / 8) * (q5 ? 176 : 144);
    const int sub = static_cast<int>(j % 8), pair = sub / 2;
    const uint8_t* qh = blk + 16;
    const uint8_t* q = blk + (q5 ? 48 : 16) + 32 * pair;
    const int hbit = (sub & 1 ? 2 : 1) << (2 * pair);
    for (int l = 0; l < 32; ++l)
      u[l] = static_cast<uint8_t>((sub & 1 ? q[l] >> 4 : q[l] & 0xF) + (q5 && (qh[l] & hbit) ? 16 : 0));
    return;
  }
  if (type == kMxfp4Type) {
    const uint8_t* blk = row + j * 17;
    for (int l = 0; l < 16; ++l) {
      u[l] = static_cast<uint8_t>(kMxfp4[blk[1 + l] & 15] + 12);
      u[l + 16] = static_cast<uint8_t>(kMxfp4[blk[1 + l] >> 4] + 12);
    }
    return;
  }
  const uint8_t* blk = row + j * weight_block_bytes(type);
  switch (type) {
    case 8:
      for (int l = 0; l < 32; ++l) u[l] = static_cast<uint8_t>(blk[2 + l] ^ 0x80);  // int8 q + 128
      return;
    case 2: case 3: {
      const uint8_t* qs = blk + (type == 2 ? 2 : 4);
      for (int l = 0; l < 16; ++l) {
        u[l] = qs[l] & 15;
        u[l + 16] = qs[l] >> 4;
      }
      return;
    }
    case 6: case 7: {
      const bool q51 = type == 7;
      const uint8_t* qhp = blk + (q51 ? 4 : 2);
      const uint8_t* qs = qhp + 4;
      uint32_t qh;
      std::memcpy(&qh, qhp, 4);
      for (int l = 0; l < 16; ++l) {
        u[l] = static_cast<uint8_t>((qs[l] & 15) | (((qh >> l) << 4) & 0x10));
        u[l + 16] = static_cast<uint8_t>((qs[l] >> 4) | ((qh >> (l + 12)) & 0x10));
      }
      return;
    }
    default: return;
  }
}

void unpack_q6k_u8(const uint8_t* row, int64_t j, uint8_t* u, float* d2) {
  // Sub-block j of 32 is quarter j % 4 of half j / 4 of its 256-value block
  // (dequantize_blocks' loop: ql + 64 and qh + 32 per half, the quarter's
  // low nibbles from ql[l] or ql[l + 32], low or high, its 2 high bits from
  // qh[l] at shift 2 * quarter).
  const uint8_t* blk = row + (j / 8) * 210;
  const int h128 = static_cast<int>(j % 8) / 4, quarter = static_cast<int>(j % 4);
  const uint8_t* ql = blk + 64 * h128 + (quarter & 1 ? 32 : 0);
  const uint8_t* qh = blk + 128 + 32 * h128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * h128 + 2 * quarter;
  for (int l = 0; l < 32; ++l) {
    const int lo = quarter < 2 ? ql[l] & 0xF : ql[l] >> 4;
    u[l] = static_cast<uint8_t>(lo | (((qh[l] >> (2 * quarter)) & 3) << 4));
  }
  // d * sc, as the float dequantizer forms it first: exact (an f16
  // significand of 11 bits times an int8).
  const float d = half(blk + 208);
  d2[0] = d * sc[0];
  d2[1] = d * sc[1];
}

}  // namespace tkv
