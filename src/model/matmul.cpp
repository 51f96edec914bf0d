#include "model/matmul.h"

#include <cstring>
#include <vector>

#include "util/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tkv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// dot(W row, x) for each of n_tok vectors; the row is decoded chunk by chunk
// and reused across the tokens (weights are the bandwidth; x stays in cache).
void RowDots(uint32_t type, const uint8_t* row, int64_t cols, const float* x, int n_tok, int64_t x_stride,
             float* out, int64_t out_stride) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int kT = 4;  // tokens per pass
  if (n_tok == 1 && (type == 8 || type == 2) && N <= 16 && 16 % N == 0) {
    // Decode: one token, so the dot of a Q8_0/Q4_0 row needs independent
    // accumulators to hide the FMA latency (one chain per 16-value half block).
    const bool q8 = type == 8;
    const int64_t bb = q8 ? 34 : 18;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const hn::Rebind<uint16_t, decltype(df)> du16;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* blk = row + b * bb;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const auto scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16, h)));
      for (int64_t o = 0; o < 16; o += N) {
        decltype(hn::Zero(df)) w0, w1;  // values o.. and 16 + o..
        if (q8) {
          const hn::Rebind<int8_t, decltype(di)> d8;
          w0 = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2 + o))));
          w1 = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 18 + o))));
        } else {
          const hn::Rebind<uint8_t, decltype(di)> d8;
          const auto q = hn::PromoteTo(di, hn::LoadU(d8, blk + 2 + o));
          w0 = hn::ConvertTo(df, hn::Sub(hn::And(q, hn::Set(di, 15)), hn::Set(di, 8)));
          w1 = hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(q), hn::Set(di, 8)));
        }
        const auto x0 = hn::Mul(hn::LoadU(df, x + b * 32 + o), scale);
        const auto x1 = hn::Mul(hn::LoadU(df, x + b * 32 + 16 + o), scale);
        if (b & 1) {
          a2 = hn::MulAdd(w0, x0, a2);
          a3 = hn::MulAdd(w1, x1, a3);
        } else {
          a0 = hn::MulAdd(w0, x0, a0);
          a1 = hn::MulAdd(w1, x1, a1);
        }
      }
    }
    out[0] = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
    return;
  }
  for (int t0 = 0; t0 < n_tok; t0 += kT) {
    const int nt = std::min(kT, n_tok - t0);
    decltype(hn::Zero(df)) acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = hn::Zero(df);
    auto fma_chunk = [&](int64_t c, decltype(hn::Zero(df)) w) {
      for (int t = 0; t < nt; ++t)
        acc[t] = hn::MulAdd(w, hn::LoadU(df, x + (t0 + t) * x_stride + c), acc[t]);
    };
    float tail[kT] = {0, 0, 0, 0};
    if (type == 0) {  // F32
      const float* w = reinterpret_cast<const float*>(row);
      int64_t c = 0;
      for (; c + N <= cols; c += N) fma_chunk(c, hn::LoadU(df, w + c));
      for (; c < cols; ++c)
        for (int t = 0; t < nt; ++t) tail[t] += w[c] * x[(t0 + t) * x_stride + c];
    } else if (type == 1 || type == 30) {  // F16, BF16
      int64_t c = 0;
      if (type == 1) {
        const hn::Rebind<hwy::float16_t, decltype(df)> dh;
        const auto* w = reinterpret_cast<const hwy::float16_t*>(row);
        for (; c + N <= cols; c += N) fma_chunk(c, hn::PromoteTo(df, hn::LoadU(dh, w + c)));
      } else {
        const hn::Rebind<hwy::bfloat16_t, decltype(df)> db;
        const auto* w = reinterpret_cast<const hwy::bfloat16_t*>(row);
        for (; c + N <= cols; c += N) fma_chunk(c, hn::PromoteTo(df, hn::LoadU(db, w + c)));
      }
      for (; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, row + 2 * c, 2);
        const float wv = type == 1 ? f16_to_f32(h) : bf16_to_f32(h);
        for (int t = 0; t < nt; ++t) tail[t] += wv * x[(t0 + t) * x_stride + c];
      }
    } else {  // Q8_0 (8) and Q4_0 (2): blocks of 32 with an f16 scale
      const bool q8 = type == 8;
      const int64_t bb = q8 ? 34 : 18;
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = row + b * bb;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        // Hardware f16 -> f32 on the broadcast scale (a software conversion
        // per block of 32 weights would cost more than the block's FMAs).
        const hn::Rebind<hwy::float16_t, decltype(df)> dh;
        const hn::Rebind<uint16_t, decltype(df)> du16;
        const auto scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16, h)));
        for (int64_t o = 0; o < 32; o += N) {
          decltype(hn::Zero(df)) w;
          if (q8) {
            const hn::Rebind<int8_t, decltype(di)> d8;
            w = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2 + o))));
          } else {
            const hn::Rebind<uint8_t, decltype(di)> d8;
            auto q = hn::PromoteTo(di, hn::LoadU(d8, blk + 2 + (o & 15)));
            q = o < 16 ? hn::And(q, hn::Set(di, 15)) : hn::ShiftRight<4>(q);
            w = hn::ConvertTo(df, hn::Sub(q, hn::Set(di, 8)));
          }
          fma_chunk(b * 32 + o, hn::Mul(w, scale));
        }
      }
    }
    for (int t = 0; t < nt; ++t) out[(t0 + t) * out_stride] = hn::GetLane(hn::SumOfLanes(df, acc[t])) + tail[t];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tkv {
HWY_EXPORT(RowDots);
namespace {
void dequantize_blocks(uint32_t type, const uint8_t* row, int64_t cols, float* out);
}

Expected<Matrix> matrix_from(const gguf::Tensor& t, const std::string& path) {
  const uint32_t ok_types[] = {0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30};
  bool ok = false;
  for (uint32_t k : ok_types) ok |= t.type == k;
  if (!ok)
    return Status::Error(path + ": tensor '" + t.name + "' has type " + t.info().name +
                         ", which the runtime does not support (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)");
  if (t.dims.size() > 2) return Status::Error(path + ": tensor '" + t.name + "' has more than 2 dims");
  Matrix m;
  m.data = t.data;
  m.type = t.type;
  m.cols = static_cast<int64_t>(t.dims[0]);
  m.rows = t.dims.size() > 1 ? static_cast<int64_t>(t.dims[1]) : 1;
  m.row_bytes = static_cast<size_t>(m.cols / t.info().block * t.info().block_bytes);
  return m;
}

void matmul(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  // F32/F16/BF16/Q8_0/Q4_0 rows are decoded inside the SIMD dot; the other
  // block types are expanded row by row into a per-thread buffer first.
  const bool direct = w.type == 0 || w.type == 1 || w.type == 30 || w.type == 8 || w.type == 2;
#pragma omp parallel num_threads(threads) if (w.rows * w.cols > 65536)
  {
    std::vector<float> buf(direct ? 0 : w.cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      if (direct) {
        HWY_DYNAMIC_DISPATCH(RowDots)(w.type, w.data + r * w.row_bytes, w.cols, x, n_tok, w.cols, y + r, w.rows);
      } else {
        dequantize_blocks(w.type, w.data + r * w.row_bytes, w.cols, buf.data());
        HWY_DYNAMIC_DISPATCH(RowDots)(0, reinterpret_cast<const uint8_t*>(buf.data()), w.cols, x, n_tok, w.cols, y + r,
                                      w.rows);
      }
    }
  }
}

namespace {

void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// ggml's block layouts (llama.cpp ggml-quants.c), one row.
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
      const int64_t bb = type == 2 ? 18 : type == 3 ? 20 : type == 6 ? 22 : type == 7 ? 24 : 34;
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

void dequantize_row(const Matrix& w, int64_t r, float* out) {
  dequantize_blocks(w.type, w.data + r * w.row_bytes, w.cols, out);
}

}  // namespace tkv
#endif
