// F16 weights on int16 products (matmul_tiled.h): AVX512-VNNI vpdpwssd
// multiplies pairs of int16 values and adds both products to an int32 lane,
// 32 products per instruction where an f32 FMA does 16, at the same rate on
// this Zen 4 (3.6-3.7 G instructions/s each, 12 independent chains, measured
// 2026-12-06). Without AVX512-FP16 this is the only way past the f32 FMA peak
// that keeps F16's precision: vdpbf16ps keeps 8 of its 11 significant bits.
//
// Both operands are quantized per block of 32 columns to |q| <= 8191 with one
// f32 scale d = max|v| / 8191 (quantize_block_i16), so a block's 32 products
// sum to at most 32 * 8191^2 < 2^31 in the int32 lane, exactly. Each value
// then carries an absolute error of at most d / 2, and
//   |y - Σ w x| <= Σ_b (d_w Σ_b |x| + d_x Σ_b |w| + 8 d_w d_x) / 2 + f32 sums,
// the bound tests/matmul/matmul_test.cpp checks against float64. Per value
// that is 2^-14 of the block's largest: below the 2^-11 relative rounding
// llama.cpp applies to every activation of an F16 product (its vec_dot_type
// is F16) for the values within 8x of their block's largest.
//
// Layout: panels of 32 rows, per block j and pair of columns p 128 bytes
// whose dword i holds row i's two int16 values (the operand of vpdpwssd
// beside one token's broadcast pair), 2 KiB a block, then the rows' scales
// per block ([j][row]). A panel of 5632 columns is 352 KiB: it stays in the
// 1 MiB L2 while every token meets it.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include <hwy/aligned_allocator.h>

#include "matmul/matmul_tiled.h"
#include "matmul/transpose16.h"
#include "util/fp16.h"

#if defined(__x86_64__) && !defined(TKV_NO_VNNI)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_cvtepi32_ps (matmul_int8.cpp)
#include <immintrin.h>
#define TKV_X86_INT16 1
#define TKV_I16_ATTR __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#endif

namespace tkv {
namespace {

constexpr uint32_t kF16 = 1;
constexpr int kRI = 32;       // rows per panel: two vectors of 16 dword lanes
constexpr int kNTI = 4;       // tokens per tile (8 int32 + 8 f32 accumulators)
constexpr int kBlock = 32;    // columns per scale
constexpr int kPairs = kBlock / 2;
constexpr int64_t kBlockCodes = kPairs * 2 * kRI;  // a panel block's int16 codes: 16 pairs x 32 rows x 2 (2 KiB)

struct Int16Acts {
  std::vector<int16_t> q;  // [token][cols]
  std::vector<float> d;    // [token][block]
  int64_t nb = 0;
};

int32_t load_pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

#ifdef TKV_X86_INT16
// quantize_block_i16 on 32 floats in two vectors: the same max (exact in any
// order), the same scalar d and 1 / d, one IEEE multiply per value and
// vcvtps2dq's rounding (nearest even, as nearbyintf), so the same bits.
TKV_I16_ATTR __m512i quantize32(__m512 v0, __m512 v1, int qmax, float* d) {
  const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
  const __m512 big = _mm512_set1_ps(FLT_MAX);
  // Not (|v| <= FLT_MAX): NaN or infinity.
  const __mmask16 bad = _mm512_cmp_ps_mask(a0, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, big, _CMP_NLE_UQ);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
  const float id = int16_block_scale(amax, bad != 0, qmax, d);
  const __m512 s = _mm512_set1_ps(id);
  const __m512i lim = _mm512_set1_epi32(qmax), nlim = _mm512_set1_epi32(-qmax);
  __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
  q0 = _mm512_max_epi32(_mm512_min_epi32(q0, lim), nlim);
  q1 = _mm512_max_epi32(_mm512_min_epi32(q1, lim), nlim);
  if (id == 0.0f) q0 = q1 = _mm512_setzero_si512();  // NaN * 0 is NaN: its conversion is not 0
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q0)), _mm512_cvtepi32_epi16(q1), 1);
}

TKV_I16_ATTR void quantize_row_fast(const float* x, int64_t cols, int16_t* q, float* d) {
  for (int64_t j = 0; j < cols / kBlock; ++j) {
    const __m512i v = quantize32(_mm512_loadu_ps(x + j * kBlock), _mm512_loadu_ps(x + j * kBlock + 16), kInt16MaxX, &d[j]);
    _mm512_storeu_si512(q + j * kBlock, v);
  }
}
#endif

Int16Acts quantize_acts(const float* x, int n_tok, int64_t cols, int threads, bool simd) {
  Int16Acts a;
  a.nb = cols / kBlock;
  a.q.resize(static_cast<size_t>(n_tok) * cols);
  a.d.resize(static_cast<size_t>(n_tok) * a.nb);
#pragma omp parallel for num_threads(threads) schedule(static) if (n_tok * cols > 65536)
  for (int t = 0; t < n_tok; ++t) {
#ifdef TKV_X86_INT16
    if (simd) {
      quantize_row_fast(x + t * cols, cols, &a.q[t * cols], &a.d[t * a.nb]);
      continue;
    }
#endif
    for (int64_t j = 0; j < a.nb; ++j)
      quantize_block_i16(x + t * cols + j * kBlock, kBlock, kInt16MaxX, &a.q[t * cols + j * kBlock], &a.d[t * a.nb + j]);
  }
  (void)simd;
  return a;
}

struct Panel16 {
  explicit Panel16(int64_t nb)
      : q(hwy::AllocateAligned<int16_t>(static_cast<size_t>(nb * kBlockCodes))),
        d(hwy::AllocateAligned<float>(static_cast<size_t>(nb * kRI))) {}
  hwy::AlignedFreeUniquePtr<int16_t[]> q;
  hwy::AlignedFreeUniquePtr<float[]> d;
};

// Index of row i's value at column c of block j in the panel's int16 array.
int64_t panel_index(int64_t j, int64_t c, int64_t i) { return j * kBlockCodes + (c / 2) * 2 * kRI + 2 * i + c % 2; }

// The scalar specification of the panel: row r0 + i's block j quantized from
// its f16 values by quantize_block_i16; rows past the matrix zeros (scale 0).
void pack_panel16(const Matrix& w, int64_t r0, int64_t nr, Panel16& p) {
  const int64_t nb = w.cols / kBlock;
  float v[kBlock];
  int16_t q[kBlock];
  for (int64_t i = 0; i < kRI; ++i)
    for (int64_t j = 0; j < nb; ++j) {
      if (i < nr) {
        const auto* row = reinterpret_cast<const uint16_t*>(w.data + (r0 + i) * w.row_bytes);
        for (int c = 0; c < kBlock; ++c) v[c] = f16_to_f32(row[j * kBlock + c]);
        quantize_block_i16(v, kBlock, kInt16MaxW, q, &p.d[j * kRI + i]);
      } else {
        std::fill(q, q + kBlock, int16_t{0});
        p.d[j * kRI + i] = 0.0f;
      }
      for (int c = 0; c < kBlock; ++c) p.q[panel_index(j, c, i)] = q[c];
    }
}

#ifdef TKV_X86_INT16
// pack_panel16's bytes: each row's block converted (vcvtph2ps, exact) and
// quantized in registers, 16 rows' blocks transposed as dwords (pairs).
TKV_I16_ATTR void pack_panel16_fast(const Matrix& w, int64_t r0, int64_t nr, Panel16& p) {
  const int64_t nb = w.cols / kBlock;
  for (int hp = 0; hp < 2; ++hp)
    for (int64_t j = 0; j < nb; ++j) {
      __m512i r[16];
      for (int e = 0; e < 16; ++e) {
        const int64_t i = hp * 16 + e;
        if (i >= nr) {
          r[e] = _mm512_setzero_si512();
          p.d[j * kRI + i] = 0.0f;
          continue;
        }
        const uint8_t* row = w.data + (r0 + i) * w.row_bytes + j * kBlock * 2;
        const __m512 v0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)));
        const __m512 v1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32)));
        r[e] = quantize32(v0, v1, kInt16MaxW, &p.d[j * kRI + i]);
      }
      transpose16_epi32(r);  // r[pair]: dword e = row 16 hp + e's pair
      int16_t* dst = p.q.get() + j * kBlockCodes + hp * 32;
      for (int pr = 0; pr < kPairs; ++pr) _mm512_store_si512(dst + pr * 2 * kRI, r[pr]);
    }
}

// NT tokens x the panel's 32 rows: per block the exact int32 dot of every
// row, then f = fma(float(dot), d_w * d_x, f), the order of matmul_int16_ref.
template <int NT>
TKV_I16_ATTR void tile16(const Panel16& p, int64_t nb, const Int16Acts& a, int64_t cols, int t0, float* out) {
  __m512 f[2][NT];
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < NT; ++t) f[h][t] = _mm512_setzero_ps();
  const int16_t* xq = a.q.data() + t0 * cols;
  const float* xd = a.d.data() + t0 * nb;
  for (int64_t j = 0; j < nb; ++j) {
    const int16_t* wj = p.q.get() + j * kBlockCodes;
    __m512i acc[2][NT];
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < NT; ++t) acc[h][t] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int pr = 0; pr < kPairs; ++pr) {
      const __m512i w0 = _mm512_load_si512(wj + pr * 2 * kRI), w1 = _mm512_load_si512(wj + pr * 2 * kRI + 32);
      for (int t = 0; t < NT; ++t) {
        const __m512i xb = _mm512_set1_epi32(load_pair(xq + t * cols + j * kBlock + 2 * pr));
        acc[0][t] = _mm512_dpwssd_epi32(acc[0][t], w0, xb);
        acc[1][t] = _mm512_dpwssd_epi32(acc[1][t], w1, xb);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m512 d = _mm512_load_ps(p.d.get() + j * kRI + h * 16);
      for (int t = 0; t < NT; ++t) {
        const __m512 sc = _mm512_mul_ps(d, _mm512_set1_ps(xd[t * nb + j]));
        f[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][t]), sc, f[h][t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h) _mm512_storeu_ps(out + t * kRI + h * 16, f[h][t]);
}

void tile16_n(int nt, const Panel16& p, int64_t nb, const Int16Acts& a, int64_t cols, int t0, float* out) {
  switch (nt) {
    case 1: return tile16<1>(p, nb, a, cols, t0, out);
    case 2: return tile16<2>(p, nb, a, cols, t0, out);
    case 3: return tile16<3>(p, nb, a, cols, t0, out);
    default: return tile16<4>(p, nb, a, cols, t0, out);
  }
}
#endif

}  // namespace

float int16_block_scale(float amax, bool non_finite, int qmax, float* d) {
  // A block holding NaN or infinity gets a NaN scale, which every product
  // it enters carries to the output; one whose largest value is below
  // 2^-100 is taken as zeros (1 / d would overflow near the f32 minimum).
  if (non_finite) {
    *d = std::nanf("");
    return 0.0f;
  }
  if (!(amax >= 0x1p-100f)) {
    *d = 0.0f;
    return 0.0f;
  }
  *d = amax / static_cast<float>(qmax);
  return 1.0f / *d;
}

void quantize_block_i16(const float* x, int n, int qmax, int16_t* q, float* d) {
  float amax = 0.0f;
  bool bad = false;
  for (int k = 0; k < n; ++k) {
    const float a = std::fabs(x[k]);
    if (!(a <= FLT_MAX)) bad = true;
    else amax = std::max(amax, a);
  }
  const float id = int16_block_scale(amax, bad, qmax, d);
  for (int k = 0; k < n; ++k) {
    const float v = id == 0.0f ? 0.0f : std::nearbyint(x[k] * id);
    q[k] = static_cast<int16_t>(std::clamp(v, static_cast<float>(-qmax), static_cast<float>(qmax)));
  }
}

bool int16_core_available() { return vnni_available(); }  // (follows simd_force_target)

bool matmul_int16(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if (w.type != kF16 || w.cols % kBlock != 0 || !int16_core_available()) return false;
#ifdef TKV_X86_INT16
  const Int16Acts a = quantize_acts(x, n_tok, w.cols, threads, true);
  const int64_t nb = a.nb, n_panels = (w.rows + kRI - 1) / kRI;
#pragma omp parallel num_threads(threads) if (w.rows * w.cols > 65536)
  {
    Panel16 p(nb);
    alignas(64) float out[kRI * kNTI];
#pragma omp for schedule(static)
    for (int64_t pi = 0; pi < n_panels; ++pi) {
      const int64_t r0 = pi * kRI, nr = std::min<int64_t>(kRI, w.rows - r0);
      pack_panel16_fast(w, r0, nr, p);
      for (int t0 = 0; t0 < n_tok; t0 += kNTI) {
        const int nt = std::min(kNTI, n_tok - t0);
        tile16_n(nt, p, nb, a, w.cols, t0, out);
        for (int t = 0; t < nt; ++t) std::memcpy(y + (t0 + t) * w.rows + r0, out + t * kRI, sizeof(float) * nr);
      }
    }
  }
  return true;
#else
  (void)x, (void)n_tok, (void)y, (void)threads;
  return false;
#endif
}

void matmul_int16_ref(const Matrix& w, const float* x, int n_tok, float* y) {
  const Int16Acts a = quantize_acts(x, n_tok, w.cols, 1, false);
  const int64_t nb = a.nb, n_panels = (w.rows + kRI - 1) / kRI;
  Panel16 p(nb);
  for (int64_t pi = 0; pi < n_panels; ++pi) {
    const int64_t r0 = pi * kRI, nr = std::min<int64_t>(kRI, w.rows - r0);
    pack_panel16(w, r0, nr, p);
    for (int64_t i = 0; i < nr; ++i)
      for (int t = 0; t < n_tok; ++t) {
        float f = 0.0f;
        for (int64_t j = 0; j < nb; ++j) {
          int32_t dot = 0;
          for (int c = 0; c < kBlock; ++c)
            dot += int32_t{p.q[panel_index(j, c, i)]} * a.q[t * w.cols + j * kBlock + c];
          f = std::fma(static_cast<float>(dot), p.d[j * kRI + i] * a.d[t * nb + j], f);
        }
        y[t * w.rows + r0 + i] = f;
      }
  }
}

}  // namespace tkv
