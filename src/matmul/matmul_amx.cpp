// F16 and BF16 weights on Intel AMX (matmul_tiled.h): tile products
// (TDPBF16PS: a 16 x 32 bf16 tile times a 32 x 16 one into 16 x 16 f32, 8192
// products an instruction, 16 times the f32 FMAs of one vector instruction)
// on weights and activations split into bf16 halves, so that rounding to
// bf16 loses nothing the f32 core keeps but 2^-15 of each product:
//   weights: w = wh + wl, wh = bf16(w) (nearest even), wl = w - wh; an F16
//     value has 11 significant bits, wh 8, so wl (3) is exact: w = wh + wl
//     exactly. BF16 weights are wh alone.
//   activations: xh = bf16(x), xl = bf16(x - xh), |x - xh - xl| <= 2^-16 |x|.
//   y = Σ wh xh + wh xl + wl xh (the term wl xl, <= 2^-16 |w x|, dropped).
// Each product then errs by at most 2^-15 |w x| (BF16 weights: 2^-16) before
// the f32 sums: |y - Σ w x| <= 2^-15 Σ |w x| + the f32 accumulation, the
// bound tests/matmul/matmul_test.cpp checks against float64. llama.cpp's
// own F16 path rounds the activations to f16 (2^-11 of each product).
//
// Layout (the operand shapes TDPBF16PS reads):
//   A = activations, per 16 tokens and 32 columns a contiguous 1 KiB tile
//     (16 tokens x 32 bf16, cols rounded up to 32 and zero padded), xh and
//     xl apart: written once a call and read by every panel.
//   B = weights, per 16 rows and 32 columns a 1 KiB tile whose row p holds,
//     for each of the 16 rows, the pair of columns (2p, 2p + 1) (a 16 x 16
//     dword transpose), wh and wl apart; panels of up to 128 rows, within
//     ~1 MiB of the 2 MiB L2 (32 rows at 5632 columns: 704 KiB).
//   C = 2 x 2 tiles of 16 tokens x 16 rows, stored into y at its row
//     stride once after all columns.
#include <algorithm>
#include <cstring>

#include <hwy/aligned_allocator.h>

#include "matmul/matmul_tiled.h"
#include "util/simd_targets.h"

#include "matmul/amx_tiles.h"
#include "matmul/transpose16.h"

#ifdef TKV_X86_AMX
// GCC 12's avx512fintrin.h: see matmul_int8.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define TKV_AMX_ATTR __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))
#endif

namespace tkv {
namespace {

constexpr uint32_t kF16 = 1, kBF16 = 30;
constexpr int kAR = 32;   // weight rows per pair of B tiles (panels hold 1-4 pairs)
constexpr int kKS = 32;   // columns per tile (16 bf16 pairs)
constexpr int kTileBf16 = 16 * kKS;  // bf16 values in a 1 KiB tile

#ifdef TKV_X86_AMX
// Every tile 16 rows x 64 bytes.
void tiles_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  tiles_load_config(cfg);
}

// 16 f32 of a vector rounded to bf16 (nearest even) and back to f32.
TKV_AMX_ATTR inline __m512 bf16_round(__m512 v) {
  const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Two vectors of 16 f32 (columns 0-15, 16-31) as 32 bf16 in column order.
TKV_AMX_ATTR inline __m512i bf16_pack(__m512 lo16, __m512 hi16) {
  return (__m512i)_mm512_cvtne2ps_pbh(hi16, lo16);
}

// Rows r0 .. r0 + nr - 1 of F16 or BF16 weights into a panel's wh and wl,
// pr rows in pr / 16 blocks; rows and columns past the matrix are 0. The
// tile of row block i and step s is 1 KiB at (i * steps + s) * 512, in the
// pair layout of TDPBF16PS's second operand: its row p holds, for each of
// the 16 weight rows, columns (32 s + 2 p, 32 s + 2 p + 1).
TKV_AMX_ATTR void fill_panel(const Matrix& w, int64_t r0, int64_t nr, int64_t pr, int64_t kp, uint16_t* wh,
                             uint16_t* wl) {
  const bool f16 = w.type == kF16;
  const int64_t steps = kp / kKS;
  __m512i h[16], l[16];
  for (int64_t i0 = 0; i0 < pr; i0 += 16) {
    for (int64_t c = 0; c < kp; c += kKS) {
      for (int64_t e = 0; e < 16; ++e) {  // row i0 + e's 32 columns: 16 pairs
        const int64_t i = i0 + e;
        const int64_t n = i < nr ? std::min<int64_t>(kKS, w.cols - c) : 0;
        const __mmask32 m = n >= 32 ? ~__mmask32{0} : n <= 0 ? 0 : (__mmask32{1} << n) - 1;
        const auto* row = reinterpret_cast<const uint16_t*>(w.data + (r0 + std::min(i, nr - 1)) * w.row_bytes);
        const __m512i raw = _mm512_maskz_loadu_epi16(m, row + std::min(c, w.cols));
        if (!f16) {
          h[e] = raw;
          continue;
        }
        const __m512 v0 = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
        const __m512 v1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1));
        const __m512 h0 = bf16_round(v0), h1 = bf16_round(v1);
        h[e] = bf16_pack(h0, h1);
        l[e] = bf16_pack(_mm512_sub_ps(v0, h0), _mm512_sub_ps(v1, h1));
      }
      const int64_t o = ((i0 / 16) * steps + c / kKS) * kTileBf16;
      transpose16_epi32(h);
      for (int p = 0; p < 16; ++p) _mm512_store_si512(wh + o + p * kKS, h[p]);
      if (!f16) continue;
      transpose16_epi32(l);
      for (int p = 0; p < 16; ++p) _mm512_store_si512(wl + o + p * kKS, l[p]);
    }
  }
}

// A token's columns into row t_in_block of its block's A tiles (tile s at
// s * 512: 16 tokens x 32 columns, contiguous): xh and xl.
TKV_AMX_ATTR void fill_token(const float* x, int64_t cols, int64_t kp, int t_in_block, uint16_t* xh, uint16_t* xl) {
  for (int64_t c = 0; c < kp; c += kKS) {
    const int64_t n = std::min<int64_t>(kKS, cols - c);
    const __mmask16 m0 = n >= 16 ? 0xFFFF : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? 0xFFFF : n <= 16 ? 0 : static_cast<__mmask16>((1u << (n - 16)) - 1);
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x + std::min(c, cols));
    const __m512 v1 = _mm512_maskz_loadu_ps(m1, x + std::min(c + 16, cols));
    const __m512 h0 = bf16_round(v0), h1 = bf16_round(v1);
    const int64_t o = (c / kKS) * kTileBf16 + t_in_block * kKS;
    _mm512_store_si512(xh + o, bf16_pack(h0, h1));
    _mm512_store_si512(xl + o, bf16_pack(_mm512_sub_ps(v0, h0), _mm512_sub_ps(v1, h1)));
  }
}

// C[j][i] += A_j B_i for the token tiles 4-5 and the weight tiles 6-7.
inline void products_2x2() {
  TKV_TILE_BF16(0, 4, 6);
  TKV_TILE_BF16(1, 4, 7);
  TKV_TILE_BF16(2, 5, 6);
  TKV_TILE_BF16(3, 5, 7);
}

// C (2 x 2 tiles) of 32 tokens and 32 rows over every column:
//   C += xl wh + xh wh (+ xh wl for F16). Tiles: 0-3 C[tokens j][rows i]
// at 2 j + i, 4-5 the token tiles, 6-7 the weight tiles. xh/xl: the first
// token block's tiles (the second's follow, steps tiles on); wh/wl: the
// first row block's. Each tile load costs about what a product does here
// (15 and 16 ns, one after the other, measured on this Xeon), so the order
// takes 8 loads for the 12 products (BF16: 6 for 8).
TKV_AMX_ATTR void pair_tokens(const uint16_t* xh, const uint16_t* xl, const uint16_t* wh, const uint16_t* wl,
                              int64_t steps) {
  const int64_t next = steps * kTileBf16;  // the second block of tokens or rows
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t b = s * kTileBf16;
    TKV_TILE_LOAD(6, wh + b, 64);
    TKV_TILE_LOAD(7, wh + next + b, 64);
    TKV_TILE_LOAD(4, xl + b, 64);
    TKV_TILE_LOAD(5, xl + next + b, 64);
    products_2x2();
    TKV_TILE_LOAD(4, xh + b, 64);
    TKV_TILE_LOAD(5, xh + next + b, 64);
    products_2x2();
    if (wl != nullptr) {
      TKV_TILE_LOAD(6, wl + b, 64);
      TKV_TILE_LOAD(7, wl + next + b, 64);
      products_2x2();
    }
  }
}

// C[tokens j][rows i] (tile 2 j + i) into y[token][row]: straight from the
// tile at y's row stride where all 16 x 16 lie inside, else through c.
TKV_AMX_ATTR void store_c(float* y, int64_t rows, int n_tok, int64_t t0, int64_t r0, float* c) {
  auto one = [&](int j, int i) {
    const int64_t t = t0 + 16 * j, r = r0 + 16 * i;
    if (t >= n_tok || r >= rows) return;
    float* dst = y + t * rows + r;
    if (t + 16 <= n_tok && r + 16 <= rows) {
      switch (2 * j + i) {
        case 0: TKV_TILE_STORE(0, dst, rows * 4); break;
        case 1: TKV_TILE_STORE(1, dst, rows * 4); break;
        case 2: TKV_TILE_STORE(2, dst, rows * 4); break;
        default: TKV_TILE_STORE(3, dst, rows * 4); break;
      }
      return;
    }
    switch (2 * j + i) {
      case 0: TKV_TILE_STORE(0, c, 64); break;
      case 1: TKV_TILE_STORE(1, c, 64); break;
      case 2: TKV_TILE_STORE(2, c, 64); break;
      default: TKV_TILE_STORE(3, c, 64); break;
    }
    const int64_t nt = std::min<int64_t>(16, n_tok - t), nr = std::min<int64_t>(16, rows - r);
    for (int64_t a = 0; a < nt; ++a) std::memcpy(dst + a * rows, c + a * 16, sizeof(float) * nr);
  };
  one(0, 0);
  one(0, 1);
  one(1, 0);
  one(1, 1);
}
#endif

}  // namespace

int amx_min_tokens(uint32_t type) { return type == kF16 ? 64 : 1; }

bool matmul_amx(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if ((w.type != kF16 && w.type != kBF16) || !amx_usable()) return false;
#ifdef TKV_X86_AMX
  const int64_t cols = w.cols, kp = (cols + kKS - 1) / kKS * kKS, steps = kp / kKS;
  const int64_t n_blocks = (n_tok + 31) / 32 * 2;  // token blocks of 16, an even count
  const size_t x_size = static_cast<size_t>(n_blocks * steps * kTileBf16);
  auto xh = hwy::AllocateAligned<uint16_t>(x_size), xl = hwy::AllocateAligned<uint16_t>(x_size);
#pragma omp parallel for num_threads(threads) schedule(static) if (n_tok * cols > 65536)
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    uint16_t* h = xh.get() + blk * steps * kTileBf16;
    uint16_t* l = xl.get() + blk * steps * kTileBf16;
    const int64_t t0 = blk * 16, nt = std::max<int64_t>(0, std::min<int64_t>(16, n_tok - t0));
    if (nt < 16) {  // tokens past the batch: 0
      std::memset(h, 0, sizeof(uint16_t) * steps * kTileBf16);
      std::memset(l, 0, sizeof(uint16_t) * steps * kTileBf16);
    }
    for (int64_t t = 0; t < nt; ++t) fill_token(x + (t0 + t) * cols, cols, kp, static_cast<int>(t), h, l);
  }
  const bool f16 = w.type == kF16;
  // Rows per panel: as many pairs of row blocks as keep wh and wl within
  // ~1 MiB of the 2 MiB L2, so that each 32 tokens' tiles, read from the L3
  // for the panel's first pair, serve the other pairs from the L2.
  const int64_t pr = std::clamp<int64_t>((1 << 20) / (kp * 4) / kAR * kAR, kAR, 4 * kAR);
  const int64_t n_panels = (w.rows + pr - 1) / pr;
#pragma omp parallel num_threads(threads) if (w.rows * cols > 65536)
  {
    auto wh = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(pr * kp));
    auto wl = hwy::AllocateAligned<uint16_t>(f16 ? static_cast<size_t>(pr * kp) : 1);
    alignas(64) float c[256];
    tiles_configure();
#pragma omp for schedule(static)
    for (int64_t pi = 0; pi < n_panels; ++pi) {
      const int64_t r0 = pi * pr, nr = std::min<int64_t>(pr, w.rows - r0);
      fill_panel(w, r0, nr, pr, kp, wh.get(), f16 ? wl.get() : nullptr);
      for (int64_t blk = 0; blk < n_blocks; blk += 2) {
        const int64_t xo = blk * steps * kTileBf16;
        for (int64_t q = 0; q * kAR < nr; ++q) {
          const int64_t wo = q * 2 * steps * kTileBf16;
          TKV_TILE_ZERO(0);
          TKV_TILE_ZERO(1);
          TKV_TILE_ZERO(2);
          TKV_TILE_ZERO(3);
          pair_tokens(xh.get() + xo, xl.get() + xo, wh.get() + wo, f16 ? wl.get() + wo : nullptr, steps);
          store_c(y, w.rows, n_tok, blk * 16, r0 + q * kAR, c);
        }
      }
    }
    tiles_release();
  }
  return true;
#else
  (void)x;
  (void)n_tok;
  (void)y;
  (void)threads;
  return false;
#endif
}

}  // namespace tkv
