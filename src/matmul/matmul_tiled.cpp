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

#ifdef TKV_VNNI
// ---- decode (one token): weight streaming with int8 activations ----
namespace {

// Q4_0 decode (Q8_0 decodes with rows in lanes: decode_q8_rows.cpp).
// One token's activations in the kernel's order: per pair of blocks
// (2p, 2p + 1) 64 codes and 4 scales {dx(2p), dx(2p+1), cs(2p), cs(2p+1)},
// which the kernel spreads over the 16 lanes of its sums: the weight vectors
// are [low nibbles of both blocks | high nibbles of both], so lanes 0-3 and
// 8-11 hold block 2p and the codes are permuted to match. cs = -8 s / 8 per
// lane, summing to the block's offset term -8 d_w s over its 8 lanes once
// multiplied by d_w (Q4_0's codes are q + 8). Four
// floats, not the 32 lanes themselves: a group of 8 tokens then reads 80
// bytes per block pair and token instead of 192 (which did not stay in L1
// for 4096-wide rows), and the lanes hold the same values, so the same bits.
struct DecodeActs {
  std::vector<int8_t> q, qp;
  std::vector<float> d, s, sc;
};

DecodeActs decode_acts(const float* x, int64_t cols) {
  DecodeActs a;
  const int64_t nb = cols / 32;
  a.q.resize(cols);
  a.d.resize(nb);
  a.s.resize(nb);
  quantize_activations_q8_simd(x, cols, a.q.data(), a.d.data(), a.s.data());
  a.qp = a.q;
  a.sc.resize(nb / 2 * 4);
  for (int64_t j = 0; j + 2 <= nb; j += 2) {
    for (int h = 0; h < 2; ++h) {
      a.sc[j * 2 + h] = a.d[j + h];
      a.sc[j * 2 + 2 + h] = -8.0f * a.s[j + h] / 8.0f;
    }
    for (int l = 0; l < 16; ++l) {
      const int64_t b = j + (l / 4) % 2;
      for (int k = 0; k < 4; ++k) a.qp[j * 32 + 4 * l + k] = a.q[b * 32 + (l >= 8 ? 16 : 0) + 4 * (l % 4) + k];
    }
  }
  return a;
}

// decode_row for NT tokens at once, each with exactly decode_row's operations
// in its order (so each token's bits equal decode_row's): the weights of a
// block pair are unpacked once for all NT tokens, which halves the
// instructions per token of a server's batched decode step (the one-token
// kernel is compute-bound, not memory-bound, from ~4 streams on).
// The activations of up to 8 tokens interleaved per block pair ([pair][token]
// 64 codes, 4 scales), so the kernel reads them from one base pointer
// (eight tokens' separate pointers spilled: perf showed the moves on top).
struct GroupActs {
  std::vector<int8_t> qp;
  std::vector<float> sc;
  const DecodeActs* a[8];
};

GroupActs group_acts(const DecodeActs* const* a, int nt, int64_t nb) {
  GroupActs g;
  const int64_t pairs = nb / 2;
  g.qp.resize(pairs * nt * 64);
  g.sc.resize(pairs * nt * 4);
  for (int t = 0; t < nt; ++t) {
    g.a[t] = a[t];
    for (int64_t p = 0; p < pairs; ++p) {
      std::memcpy(&g.qp[(p * nt + t) * 64], a[t]->qp.data() + p * 64, 64);
      std::memcpy(&g.sc[(p * nt + t) * 4], a[t]->sc.data() + p * 4, 16);
    }
  }
  return g;
}

constexpr int64_t kQ4Block = 18;  // f16 scale + 16 bytes of nibbles
// Bytes ahead of the loads that the Q4_0 kernel prefetches, once per block
// pair of 36 bytes (as the float rows of matmul.cpp: AMD's stream prefetcher
// stops at 4 KB pages), into L2 as there.
constexpr int64_t kQ4Prefetch = 6144;

// One block pair of a Q4_0 row as the kernel's 64 unsigned codes (lane order
// of DecodeActs) and the two weight scales spread to match: the pair's 36
// bytes as two 32-byte loads (words 0-15 and 2-17; a masked 36-byte load ran
// the one-thread Q4_0 decode 2x slower on this AMD EPYC), then words moved by
// vpermt2w / vpermw: the nibble bytes of both blocks ([qa | qb | qa | qb],
// the high half shifted by 4) and the scales ([ha x 4 | hb x 4] twice,
// converted by vcvtph2ps), where 16-byte loads, inserts, scalar scale loads
// and broadcasts took twice the uops.
struct PairIdx {
  alignas(64) int16_t codes[32];
  alignas(64) int16_t scales[32];
  alignas(64) int16_t shift[32];
  PairIdx() {
    for (int k = 0; k < 32; ++k) {
      const int i = k % 16;  // word i of [qa | qb]: qa = words 1..8 of the pair, qb = words 10..17
      const int word = i < 8 ? 1 + i : 10 + (i - 8);
      codes[k] = static_cast<int16_t>(word < 16 ? word : 32 + word - 2);  // words 16, 17: the second load's 14, 15
      scales[k] = static_cast<int16_t>((k / 4) % 2 == 0 ? 0 : 9);  // lanes 0-3, 8-11: ha (word 0); 4-7, 12-15: hb (word 9)
      shift[k] = static_cast<int16_t>(k < 16 ? 0 : 4);
    }
  }
};
const PairIdx kPairIdx;

TKV_VNNI_ATTR inline void unpack_pair(const uint8_t* pa, __m512i& w, __m512& hs) {
  const __m512i a = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa)));
  const __m512i b = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 4)));
  const __m512i t = _mm512_permutex2var_epi16(a, _mm512_load_si512(kPairIdx.codes), b);
  w = _mm512_and_si512(_mm512_srlv_epi16(t, _mm512_load_si512(kPairIdx.shift)), _mm512_set1_epi8(0x0F));
  hs = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(kPairIdx.scales), a)));
}

// NR rows x NT tokens: qp_all, sc_all are the tokens' activations
// interleaved per block pair (GroupActs; for one token, DecodeActs' own
// arrays); a: each token's, for an odd last block. Every (row, token) lane
// does exactly the one-row one-token operations in their order, so its bits
// do not depend on NR or NT; sharing is of loads only: a row's block pair is
// unpacked once for all NT tokens, and a token's codes and spread scales are
// loaded once for all NR rows (8 tokens of one row at a time read 80 bytes
// of activations per 64 weights; two rows halve that, which a 16-stream
// server step is bound by).
template <int NR, int NT>
TKV_VNNI_ATTR void decode_rows_tokens(const uint8_t* rows, int64_t row_bytes, int64_t nb, const int8_t* qp_all,
                                      const float* sc_all, const DecodeActs* const* a, float* out,
                                      int64_t out_stride) {
  __m512 f[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) f[r][t] = _mm512_setzero_ps();
  // Lanes of {dx(a), dx(b), cs(a), cs(b)} per lane of the sums (see DecodeActs).
  const __m512i idx_d = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
  const __m512i idx_c = _mm512_add_epi32(idx_d, _mm512_set1_epi32(2));
  int64_t j = 0;
  for (; j + 2 <= nb; j += 2) {
    __m512i w[NR];
    __m512 hs[NR];
    for (int r = 0; r < NR; ++r) {
      const uint8_t* pa = rows + r * row_bytes + j * kQ4Block;
      _mm_prefetch(reinterpret_cast<const char*>(pa + kQ4Prefetch), _MM_HINT_T1);
      unpack_pair(pa, w[r], hs[r]);
    }
    const int8_t* qp = qp_all + (j / 2) * NT * 64;
    const float* sc = sc_all + (j / 2) * NT * 4;
    for (int t = 0; t < NT; ++t) {
      const __m512i q = _mm512_loadu_si512(qp + t * 64);
      const __m512 s4 = _mm512_castps128_ps512(_mm_loadu_ps(sc + t * 4));
      const __m512 dx = _mm512_permutexvar_ps(idx_d, s4), cs = _mm512_permutexvar_ps(idx_c, s4);
      for (int r = 0; r < NR; ++r) {
        const __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r], q);
        const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dx, cs);
        f[r][t] = _mm512_fmadd_ps(hs[r], v, f[r][t]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) {
      float tail = 0.0f;
      for (int64_t k0 = j; k0 < nb; ++k0) {  // an odd last block
        uint8_t u[32];
        float d, m;
        unpack_u8(2, rows + r * row_bytes, k0, u, &d, &m);  // Q4_0
        int32_t isum = 0;
        for (int k = 0; k < 32; ++k) isum += u[k] * a[t]->q[k0 * 32 + k];
        tail += d * a[t]->d[k0] * static_cast<float>(isum) + m * a[t]->s[k0];
      }
      out[r + t * out_stride] = _mm512_reduce_add_ps(f[r][t]) + tail;
    }
}

// One token: the same kernel, so a token decoded alone and in a group of up
// to 8 gets the same bits (matmul_tokens).
TKV_VNNI_ATTR float decode_row(const uint8_t* row, int64_t nb, const DecodeActs& a) {
  const DecodeActs* ap = &a;
  float out = 0.0f;
  decode_rows_tokens<1, 1>(row, 0, nb, a.qp.data(), a.sc.data(), &ap, &out, 1);
  return out;
}

}  // namespace
#endif

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
  if (w.type == 8 || w.type == kMxfp4Type || decode_q8_rows_avx2_used(w.type)) return decode_q8_rows(w, x, 1, y, threads);
  if (w.type == 12 || w.type == 13 || w.type == 14) return decode_kquants(w, x, 1, y, threads);
  if (w.type != 2 || w.cols % 32 != 0 || !vnni_available()) return false;
#ifdef TKV_VNNI
  const DecodeActs a = decode_acts(x, w.cols);
  const int64_t nb = w.cols / 32;
#pragma omp parallel for num_threads(threads) schedule(static) if (w.rows * w.cols > 65536)
  for (int64_t r = 0; r < w.rows; ++r) y[r] = decode_row(w.data + r * w.row_bytes, nb, a);
  return true;
#else
  return false;
#endif
}

bool int8_decode_team_supported(const Matrix& w) {
  if (w.type == 12 || w.type == 13 || w.type == 14)
    return w.cols % 256 == 0 && (vnni_available() || avx2_decode_available());
  if (decode_q8_rows_avx2_used(w.type)) return w.cols % 32 == 0;
  if (!vnni_available()) return false;
  if (w.type == 8 || w.type == kMxfp4Type || w.type == 2) return w.cols % 32 == 0;
  return false;
}

void int8_decode_team(const Matrix& w, const float* x, float* y) {
  if (w.type == 8 || w.type == kMxfp4Type || decode_q8_rows_avx2_used(w.type)) return decode_q8_rows_team(w, x, y);
  if (w.type == 12 || w.type == 13 || w.type == 14) return decode_kquants_team(w, x, y);
#ifdef TKV_VNNI
  const DecodeActs a = decode_acts(x, w.cols);
  const int64_t nb = w.cols / 32;
#pragma omp for schedule(static) nowait
  for (int64_t r = 0; r < w.rows; ++r) y[r] = decode_row(w.data + r * w.row_bytes, nb, a);
#else
  (void)x;
  (void)y;
#endif
}

bool matmul_int8_decode_tokens(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if (w.type == 8 || w.type == kMxfp4Type || decode_q8_rows_avx2_used(w.type))
    return decode_q8_rows(w, x, n_tok, y, threads);
  if (w.type == 12 || w.type == 13 || w.type == 14) return decode_kquants(w, x, n_tok, y, threads);
  if (w.type != 2 || w.cols % 32 != 0 || !vnni_available()) return false;
#ifdef TKV_VNNI
  std::vector<DecodeActs> acts;
  for (int t = 0; t < n_tok; ++t) acts.push_back(decode_acts(x + t * w.cols, w.cols));
  const int64_t nb = w.cols / 32;
  std::vector<const DecodeActs*> ap;
  for (const auto& x : acts) ap.push_back(&x);
  std::vector<GroupActs> groups;
  for (int t0 = 0; t0 < n_tok; t0 += 8) groups.push_back(group_acts(ap.data() + t0, std::min(8, n_tok - t0), nb));
  // Pairs of rows (an odd last row alone) x groups of up to 8 tokens.
  const int64_t pairs_of_rows = (w.rows + 1) / 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (w.rows * w.cols > 65536)
  for (int64_t rp = 0; rp < pairs_of_rows; ++rp) {
    const int64_t r = rp * 2;
    const uint8_t* row = w.data + r * w.row_bytes;
    const bool two = r + 1 < w.rows;
    for (int t0 = 0; t0 < n_tok; t0 += 8) {  // 2 x 8 accumulators + the pairs' registers fit the 32 zmm
      const GroupActs& at = groups[t0 / 8];
      float* out = y + t0 * w.rows + r;
#define TKV_CASE(NT)                                                                                         \
  case NT:                                                                                                   \
    if (two) decode_rows_tokens<2, NT>(row, w.row_bytes, nb, at.qp.data(), at.sc.data(), at.a, out, w.rows); \
    else decode_rows_tokens<1, NT>(row, w.row_bytes, nb, at.qp.data(), at.sc.data(), at.a, out, w.rows);     \
    break;
      switch (std::min(8, n_tok - t0)) {
        TKV_CASE(1)
        TKV_CASE(2)
        TKV_CASE(3)
        TKV_CASE(4)
        TKV_CASE(5)
        TKV_CASE(6)
        TKV_CASE(7)
        default: TKV_CASE(8)
      }
#undef TKV_CASE
    }
  }
  return true;
#else
  return false;
#endif
}

}  // namespace tkv
#endif  // HWY_ONCE
