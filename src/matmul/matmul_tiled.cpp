// Prefill cores (matmul_tiled.h). The f32 core runs on every Highway target;
// the int8 kernel uses vpdpbusd, which Highway 1.0.3 (Debian 12) does not
// expose, so it is written with AVX-512 intrinsics and picked at run time.
#include "matmul/matmul_tiled.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gguf/weight_blocks.h"
#include "util/fp16.h"
#include "util/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "matmul/matmul_tiled.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/aligned_allocator.h>
#if defined(__x86_64__)
#include <immintrin.h>  // PanelBlock16 (the AVX-512 targets)
#endif

HWY_BEFORE_NAMESPACE();
namespace tkv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Micro-tile: kMR vectors of weight rows x kNT tokens of accumulators, plus
// kMR weight vectors and one broadcast: 24 + 4 of AVX-512's 32 registers,
// 12 + 3 of AVX2's 16.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kMR = 3, kNT = 8;
#else
constexpr int kMR = 2, kNT = 6;
#endif
constexpr int64_t kKc = 256;  // columns per packed chunk (whole blocks of every type)

// y[t][r0 + i] (+)= Σ_k wp[k][i] x[t][k] for i < R, t < NT; wp is the
// transposed panel chunk (R = kMR lanes-wide rows per k).
template <int NT>
HWY_INLINE void TileF32(const float* HWY_RESTRICT wp, int64_t kc, const float* HWY_RESTRICT x, int64_t x_stride,
                        float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const size_t N = hn::Lanes(df), R = kMR * N;
  V acc[kMR][NT];
  for (int m = 0; m < kMR; ++m)
    for (int t = 0; t < NT; ++t) acc[m][t] = hn::Zero(df);
  for (int64_t k = 0; k < kc; ++k) {
    V w[kMR];
    for (int m = 0; m < kMR; ++m) w[m] = hn::Load(df, wp + k * R + m * N);
    for (int t = 0; t < NT; ++t) {
      const V xb = hn::Set(df, x[t * x_stride + k]);
      for (int m = 0; m < kMR; ++m) acc[m][t] = hn::MulAdd(w[m], xb, acc[m][t]);
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int m = 0; m < kMR; ++m) hn::Store(acc[m][t], df, out + t * R + m * N);
}

// unpack_f32 with hardware conversions for F16 and BF16 (exact either way):
// the scalar f16 conversion was 13 % of an F16 prefill (perf, 2048 x 2048 x 512).
void UnpackRow(uint32_t type, const uint8_t* row, int64_t k0, int64_t n, float* HWY_RESTRICT out) {
  if (type != 1 && type != 30) return unpack_f32(type, row, k0, n, out);
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t k = 0;
  if (type == 1) {
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const auto* src = reinterpret_cast<const hwy::float16_t*>(row) + k0;
    for (; k + N <= n; k += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, src + k)), df, out + k);
  } else {
    const hn::Rebind<hwy::bfloat16_t, decltype(df)> db;
    const auto* src = reinterpret_cast<const hwy::bfloat16_t*>(row) + k0;
    for (; k + N <= n; k += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(db, src + k)), df, out + k);
  }
  if (k < n) unpack_f32(type, row, k0 + k, n - k, out + k);
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// 16 rows x 16 columns of an F32/F16/BF16 panel chunk, transposed in
// registers: four stages of block swaps (blocks of 8, 4, 2, 1 lanes), each a
// pair of vpermt2ps per pair of rows. Row by row the scatter into the panel
// was 4.5 % of an F16 pp512 on two threads (perf), as much as 3.6 stores per
// weight against the tile's 1/8 FMA per weight and token.
// Lane indices of one stage (block size 8 >> s): row i's new lanes (keep its
// own where the column's bit is clear, else row i + b's, shifted) and row
// i + b's.
struct SwapIdx {
  int32_t keep[4][16], take[4][16];
};
constexpr SwapIdx MakeSwapIdx() {
  SwapIdx t{};
  for (int s = 0; s < 4; ++s) {
    const int b = 8 >> s;
    for (int c = 0; c < 16; ++c) {
      t.keep[s][c] = (c & b) ? 16 + c - b : c;
      t.take[s][c] = (c & b) ? 16 + c : c + b;
    }
  }
  return t;
}
alignas(64) constexpr SwapIdx kSwapIdx = MakeSwapIdx();

template <uint32_t kType>
HWY_INLINE void PanelBlock16(const uint8_t* data, size_t row_bytes, int64_t col, float* HWY_RESTRICT dst,
                             int64_t dst_stride) {
  __m512 v[16];
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const uint8_t* row = data + r * row_bytes;
    if (kType == 0) {
      v[r] = _mm512_loadu_ps(reinterpret_cast<const float*>(row) + col);
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * col));
      v[r] = kType == 1 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    const int b = 8 >> s;
    const __m512i ki = _mm512_load_si512(kSwapIdx.keep[s]), ti = _mm512_load_si512(kSwapIdx.take[s]);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      if (!(i & b)) {
        const __m512 a = v[i], c = v[i + b];
        v[i] = _mm512_permutex2var_ps(a, ki, c);
        v[i + b] = _mm512_permutex2var_ps(a, ti, c);
      }
  }
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c) _mm512_store_ps(dst + c * dst_stride, v[c]);
}

template <uint32_t kType>
void PanelBlocks16(const uint8_t* rows, size_t row_bytes, int64_t k0, int64_t k16, float* HWY_RESTRICT wp, int64_t R) {
  for (int64_t k = 0; k < k16; k += 16) PanelBlock16<kType>(rows, row_bytes, k0 + k, wp + k * R, R);
}
#endif

// Rows r0 .. r0 + nr of columns k0 .. k0 + kc into the panel wp[k][i]
// (R lanes per column; rows past the matrix are zeros).
void FillPanel(uint32_t type, const uint8_t* data, size_t row_bytes, int64_t r0, int64_t nr, int64_t k0, int64_t kc,
               int64_t R, float* HWY_RESTRICT wp, float* HWY_RESTRICT row) {
  int64_t i0 = 0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (type == 0 || type == 1 || type == 30) {
    const int64_t k16 = kc / 16 * 16;
    for (; i0 + 16 <= nr; i0 += 16) {
      const uint8_t* rows = data + (r0 + i0) * row_bytes;
      if (type == 0) PanelBlocks16<0>(rows, row_bytes, k0, k16, wp + i0, R);
      else if (type == 1) PanelBlocks16<1>(rows, row_bytes, k0, k16, wp + i0, R);
      else PanelBlocks16<30>(rows, row_bytes, k0, k16, wp + i0, R);
      for (int64_t i = i0; i < i0 + 16; ++i) {  // the last kc % 16 columns
        if (k16 == kc) break;
        UnpackRow(type, data + (r0 + i) * row_bytes, k0 + k16, kc - k16, row);
        for (int64_t k = k16; k < kc; ++k) wp[k * R + i] = row[k - k16];
      }
    }
  }
#endif
  for (int64_t i = i0; i < R; ++i) {
    if (i < nr) UnpackRow(type, data + (r0 + i) * row_bytes, k0, kc, row);
    for (int64_t k = 0; k < kc; ++k) wp[k * R + i] = i < nr ? row[k] : 0.0f;
  }
}

// Tokens per work item of the tiled core (a multiple of kNT: 8 or 6).
constexpr int64_t kTokenChunk = 48;

void MatmulTiledF32(uint32_t type, const uint8_t* data, int64_t rows, int64_t cols, size_t row_bytes, const float* x,
                    int n_tok, float* y, int threads) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), R = kMR * N;
  const int64_t n_panels = (rows + R - 1) / R;
  // Work items: (panel, chunk of kTokenChunk tokens), panel-major, split
  // into `threads` equal runs, so each thread fills the panels of its run
  // (one panel at most is filled by two threads) and the work is balanced to
  // a chunk: a split by whole panels left one thread idle for a panel's work
  // at the end of each matrix (k, v of the 0.85B model: 11 panels, 6 against
  // 5). A token's bits do not depend on the split: each (row, token) lane
  // does the same operations in the same order whatever tile it shares.
  const int64_t n_tc = (n_tok + kTokenChunk - 1) / kTokenChunk, items = n_panels * n_tc;
  const int slots = std::max(threads, 1);
#pragma omp parallel num_threads(threads) if (rows * cols > 65536)
  {
    auto wp = hwy::AllocateAligned<float>(static_cast<size_t>(R * kKc));
    auto out = hwy::AllocateAligned<float>(static_cast<size_t>(R * kNT));
    std::vector<float> row(kKc);
#pragma omp for schedule(static, 1)
    for (int s = 0; s < slots; ++s) {
      const int64_t i0 = items * s / slots, i1 = items * (s + 1) / slots;
      for (int64_t p = i0 / n_tc; p * n_tc < i1; ++p) {
        const int64_t r0 = p * R, nr = std::min(R, rows - r0);
        const int t_begin = static_cast<int>((std::max(i0, p * n_tc) - p * n_tc) * kTokenChunk);
        const int t_end = static_cast<int>(std::min<int64_t>(n_tok, (std::min(i1, (p + 1) * n_tc) - p * n_tc) * kTokenChunk));
        for (int64_t k0 = 0; k0 < cols; k0 += kKc) {
          const int64_t kc = std::min(kKc, cols - k0);
          FillPanel(type, data, row_bytes, r0, nr, k0, kc, R, wp.get(), row.data());
          for (int t0 = t_begin; t0 < t_end; t0 += kNT) {
            const int nt = std::min(kNT, t_end - t0);
            const float* xt = x + t0 * cols + k0;
            switch (nt) {
              case 1: TileF32<1>(wp.get(), kc, xt, cols, out.get()); break;
              case 2: TileF32<2>(wp.get(), kc, xt, cols, out.get()); break;
              case 3: TileF32<3>(wp.get(), kc, xt, cols, out.get()); break;
              case 4: TileF32<4>(wp.get(), kc, xt, cols, out.get()); break;
              case 5: TileF32<5>(wp.get(), kc, xt, cols, out.get()); break;
              case 6: TileF32<6>(wp.get(), kc, xt, cols, out.get()); break;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
              case 7: TileF32<7>(wp.get(), kc, xt, cols, out.get()); break;
              case 8: TileF32<8>(wp.get(), kc, xt, cols, out.get()); break;
#endif
              default: break;
            }
            for (int t = 0; t < nt; ++t) {
              float* yt = y + (t0 + t) * rows + r0;
              const float* o = out.get() + t * R;
              if (k0 == 0) {
                std::memcpy(yt, o, sizeof(float) * nr);
              } else {
                int64_t i = 0;
                for (; i + N <= nr; i += N) hn::StoreU(hn::Add(hn::LoadU(df, yt + i), hn::Load(df, o + i)), df, yt + i);
                for (; i < nr; ++i) yt[i] += o[i];
              }
            }
          }
        }
      }
    }
  }
}

// quantize_activations_q8 (the scalar specification) with the same bits:
// the max is exact in any order, x * (1 / d) is one IEEE multiply, and
// NearestInt rounds half to even like nearbyint. Scalar, it was 15 % of an
// int8 prefill (perf, 2048 x 2048 Q8_0 x 512 tokens).
void QuantizeActsQ8(const float* HWY_RESTRICT x, int64_t cols, int8_t* HWY_RESTRICT q, float* HWY_RESTRICT d,
                    float* HWY_RESTRICT s) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + b * 32;
    auto mx = hn::Zero(df);
    for (int64_t o = 0; o < 32; o += N) mx = hn::Max(mx, hn::Abs(hn::LoadU(df, xb + o)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, mx));
    const float db = amax / 127.0f, id = recip_or_zero(db);
    auto sum = hn::Zero(di);
    for (int64_t o = 0; o < 32; o += N) {
      auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + o), hn::Set(df, id)));
      qi = hn::Min(hn::Max(qi, hn::Set(di, -127)), hn::Set(di, 127));
      sum = hn::Add(sum, qi);
      hn::StoreU(hn::DemoteTo(d8, qi), d8, q + b * 32 + o);
    }
    d[b] = db;
    s[b] = db * static_cast<float>(hn::GetLane(hn::SumOfLanes(di, sum)));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__) && !defined(TKV_NO_VNNI)
#include <immintrin.h>
#define TKV_VNNI 1
#define TKV_VNNI_ATTR __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#endif

namespace tkv {
HWY_EXPORT(MatmulTiledF32);
HWY_EXPORT(QuantizeActsQ8);

void matmul_tiled_f32(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  HWY_DYNAMIC_DISPATCH(MatmulTiledF32)(w.type, w.data, w.rows, w.cols, w.row_bytes, x, n_tok, y, threads);
}

int32_t quantize_block_q8(const float* x, int n, int8_t* q, float* d) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float db = amax / 127.0f, id = recip_or_zero(db);
  int32_t sum = 0;
  for (int j = 0; j < n; ++j) {
    // Clamped as a float, before the conversion: a NaN (never finite input)
    // becomes -127 instead of an undefined float-to-int conversion.
    const int v = static_cast<int>(std::min(127.0f, std::max(-127.0f, std::nearbyint(x[j] * id))));
    q[j] = static_cast<int8_t>(v);
    sum += v;
  }
  *d = db;
  return sum;
}

void quantize_activations_q8(const float* x, int64_t cols, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const int32_t sum = quantize_block_q8(x + b * 32, 32, q + b * 32, &d[b]);
    s[b] = d[b] * static_cast<float>(sum);
  }
}

void quantize_activations_q8_simd(const float* x, int64_t cols, int8_t* q, float* d, float* s) {
  HWY_DYNAMIC_DISPATCH(QuantizeActsQ8)(x, cols, q, d, s);
}

bool vnni_available() {
#ifdef TKV_VNNI
  // Follows simd_force_target: the kernels are AVX-512, so they run only while
  // dispatch may pick an AVX-512 target.
  const int64_t t = simd_supported_targets();
  return (t & (HWY_AVX3 | HWY_AVX3_DL)) != 0 && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool avx2_decode_available() {
#ifdef TKV_VNNI
  const int64_t t = simd_supported_targets();
  return (t & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) != 0 && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool matmul_int8_decode(const Matrix& w, const float* x, float* y, int threads) {
  if (decode_q8_rows_takes(w.type)) return decode_q8_rows(w, x, 1, y, threads);
  if (w.type == 12 || w.type == 13 || w.type == 14) return decode_kquants(w, x, 1, y, threads);
  return false;
}

bool int8_decode_team_supported(const Matrix& w) {
  if (w.type == 12 || w.type == 13 || w.type == 14)
    return w.cols % 256 == 0 && (vnni_available() || avx2_decode_available());
  if (decode_q8_rows_avx2_used(w.type)) return w.cols % 32 == 0;
  if (!vnni_available()) return false;
  if (decode_q8_rows_takes(w.type)) return w.cols % 32 == 0;
  return false;
}

void int8_decode_team(const Matrix& w, const float* x, float* y) {
  if (decode_q8_rows_takes(w.type)) return decode_q8_rows_team(w, x, y);
  if (w.type == 12 || w.type == 13 || w.type == 14) return decode_kquants_team(w, x, y);
}

bool matmul_int8_decode_tokens(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if (decode_q8_rows_takes(w.type)) return decode_q8_rows(w, x, n_tok, y, threads);
  if (w.type == 12 || w.type == 13 || w.type == 14) return decode_kquants(w, x, n_tok, y, threads);
  return false;
}

}  // namespace tkv
#endif  // HWY_ONCE
