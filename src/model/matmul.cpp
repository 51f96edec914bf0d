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
        const auto scale = hn::Set(df, f16_to_f32(h));
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

Expected<Matrix> matrix_from(const gguf::Tensor& t, const std::string& path) {
  const uint32_t ok_types[] = {0, 1, 2, 8, 30};
  bool ok = false;
  for (uint32_t k : ok_types) ok |= t.type == k;
  if (!ok)
    return Status::Error(path + ": tensor '" + t.name + "' has type " + t.info().name +
                         ", which the runtime does not support yet (F32, F16, BF16, Q8_0, Q4_0)");
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
#pragma omp parallel for schedule(static) num_threads(threads) if (w.rows * w.cols > 65536)
  for (int64_t r = 0; r < w.rows; ++r)
    HWY_DYNAMIC_DISPATCH(RowDots)(w.type, w.data + r * w.row_bytes, w.cols, x, n_tok, w.cols, y + r, w.rows);
}

void dequantize_row(const Matrix& w, int64_t r, float* out) {
  const uint8_t* row = w.data + r * w.row_bytes;
  switch (w.type) {
    case 0: std::memcpy(out, row, sizeof(float) * w.cols); break;
    case 1: case 30:
      for (int64_t c = 0; c < w.cols; ++c) {
        uint16_t h;
        std::memcpy(&h, row + 2 * c, 2);
        out[c] = w.type == 1 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    default: {
      const bool q8 = w.type == 8;
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * (q8 ? 34 : 18);
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float d = f16_to_f32(h);
        for (int j = 0; j < 32; ++j) {
          const int q = q8 ? static_cast<int8_t>(blk[2 + j])
                           : ((j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4)) - 8);
          out[b * 32 + j] = q * d;
        }
      }
    }
  }
}

}  // namespace tkv
#endif
