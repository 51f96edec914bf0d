// BF16 weights with the dot-product instruction (matmul_tiled.h): AVX512-BF16
// vdpbf16ps multiplies pairs of bf16 values and adds both products to an f32
// lane, 32 products per instruction where an f32 FMA does 16. The weights are
// bf16 already; the activations are rounded to bf16 (nearest even) once per
// token, as llama.cpp does for BF16 weights (its vec_dot_type). Each
// activation then carries a relative error of at most 2^-8, so
//   |y - Σ w x| <= 2^-8 Σ |w x| + the f32 accumulation,
// the bound tests/matmul/matmul_test.cpp checks against float64.
//
// Layout: panels of 32 rows (two vectors of 16 f32 lanes), per pair of
// columns (2p, 2p + 1) 128 bytes whose dword i holds row i's two bf16
// weights, the pair the instruction multiplies with one token's two
// activations broadcast. A panel row of 5632 columns is 11 KiB, the panel
// 352 KiB: it stays in the 1 MiB L2 while every token meets it.
#include <algorithm>
#include <cstring>
#include <vector>

#include <hwy/aligned_allocator.h>
#include <hwy/targets.h>

#include "matmul/matmul_tiled.h"
#include "util/fp16.h"
#include "util/simd_targets.h"

#if defined(__x86_64__) && !defined(TKV_NO_VNNI)
#include <immintrin.h>
#define TKV_X86_BF16 1
#define TKV_BF16_ATTR __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))
#endif

namespace tkv {
namespace {

constexpr uint32_t kBF16 = 30;
constexpr int kRB = 32;  // rows per panel
constexpr int kNTB = 8;  // tokens per tile: 16 accumulators + 2 weight vectors + 1 broadcast of the 32 zmm

// Round to nearest even (the conversion vcvtne2ps2bf16 does; NaN stays NaN).
uint16_t bf16_rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

#ifdef TKV_X86_BF16
template <int NT>
TKV_BF16_ATTR void tile_bf16(const uint16_t* panel, int64_t pairs, const uint16_t* x, int64_t x_stride, float* out) {
  __m512 f[2][NT];
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < NT; ++t) f[h][t] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh w0 = (__m512bh)_mm512_load_si512(panel + p * 2 * kRB);
    const __m512bh w1 = (__m512bh)_mm512_load_si512(panel + p * 2 * kRB + 32);
    for (int t = 0; t < NT; ++t) {
      int32_t xv;
      std::memcpy(&xv, x + t * x_stride + 2 * p, 4);
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(xv);
      f[0][t] = _mm512_dpbf16_ps(f[0][t], w0, xb);
      f[1][t] = _mm512_dpbf16_ps(f[1][t], w1, xb);
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h) _mm512_storeu_ps(out + t * kRB + h * 16, f[h][t]);
}

void tile_bf16_n(int nt, const uint16_t* panel, int64_t pairs, const uint16_t* x, int64_t x_stride, float* out) {
  switch (nt) {
    case 1: return tile_bf16<1>(panel, pairs, x, x_stride, out);
    case 2: return tile_bf16<2>(panel, pairs, x, x_stride, out);
    case 3: return tile_bf16<3>(panel, pairs, x, x_stride, out);
    case 4: return tile_bf16<4>(panel, pairs, x, x_stride, out);
    case 5: return tile_bf16<5>(panel, pairs, x, x_stride, out);
    case 6: return tile_bf16<6>(panel, pairs, x, x_stride, out);
    case 7: return tile_bf16<7>(panel, pairs, x, x_stride, out);
    default: return tile_bf16<8>(panel, pairs, x, x_stride, out);
  }
}
#endif

}  // namespace

bool bf16_dot_available() {
#ifdef TKV_X86_BF16
  // Follows simd_force_target, like the int8 kernels.
  const int64_t t = simd_supported_targets();
  return (t & (HWY_AVX3 | HWY_AVX3_DL)) != 0 && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool matmul_bf16(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if (w.type != kBF16 || !bf16_dot_available()) return false;
#ifdef TKV_X86_BF16
  const int64_t cols = w.cols, pairs = (cols + 1) / 2, n_panels = (w.rows + kRB - 1) / kRB;
  // Activations as bf16, an odd last column padded with a zero.
  std::vector<uint16_t> xb(static_cast<size_t>(n_tok * 2 * pairs), 0);
#pragma omp parallel for num_threads(threads) schedule(static) if (n_tok * cols > 65536)
  for (int t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < cols; ++c) xb[t * 2 * pairs + c] = bf16_rne(x[t * cols + c]);
#pragma omp parallel num_threads(threads) if (w.rows * cols > 65536)
  {
    auto panel = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(pairs * 2 * kRB));
    alignas(64) float out[kRB * kNTB];
#pragma omp for schedule(static)
    for (int64_t pi = 0; pi < n_panels; ++pi) {
      const int64_t r0 = pi * kRB, nr = std::min<int64_t>(kRB, w.rows - r0);
      if (nr < kRB || cols % 2) std::memset(panel.get(), 0, sizeof(uint16_t) * pairs * 2 * kRB);
      for (int64_t i = 0; i < nr; ++i) {
        const auto* row = reinterpret_cast<const uint16_t*>(w.data + (r0 + i) * w.row_bytes);
        for (int64_t c = 0; c < cols; ++c) panel[(c / 2) * 2 * kRB + 2 * i + c % 2] = row[c];
      }
      for (int t0 = 0; t0 < n_tok; t0 += kNTB) {
        const int nt = std::min(kNTB, n_tok - t0);
        tile_bf16_n(nt, panel.get(), pairs, xb.data() + t0 * 2 * pairs, 2 * pairs, out);
        for (int t = 0; t < nt; ++t) std::memcpy(y + (t0 + t) * w.rows + r0, out + t * kRB, sizeof(float) * nr);
      }
    }
  }
  return true;
#else
  return false;
#endif
}

}  // namespace tkv
