// Decode (one token, and each token of a server's decode group) for Q4_K,
// Q5_K and Q6_K weights: the rows streamed once, integer dot products with
// activations quantized per 256 (llama.cpp's Q8_K: one scale per block of
// 256, so each super-block's sub-block scales and mins stay integers).
//
// Why: the row core expanded K-quant rows to floats with scalar code before
// its dot (Q4_K 8.5 GFLOP/s, Q6_K 1.7 on one 2048 x 2048 matrix; a 1 GB
// Q4_K model decoded 3.7 tokens/s on two threads where its bytes allow ~25).
//
// Per row and super-block b (AVX512-VNNI): the 4-bit codes (plus Q5_K's
// fifth bit, Q6_K's two high bits) are unpacked into 64-byte vectors of
// unsigned codes whose order the activations were permuted to match once per
// token; vpdpbusd gives 16 dword lanes of 4-product sums, each lane inside
// one sub-block, multiplied by that sub-block's integer scale (vpmulld) and
// summed over the super-block; then one float step per super-block
//   f += float(isum_b) * (d_b * dx_b)   (lane-wise, reduced once per row)
// and the mins (Q4_K/Q5_K) or the -32 (Q6_K) as an integer per super-block:
//   off += float(Σ_j m_j Σq_j) * (dmin_b * dx_b).
// Each (row, token) does exactly these operations whatever rows and tokens
// share the call, so a token's bits do not depend on the group
// (matmul_tokens), nor on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "matmul/matmul_tiled.h"
#include "gguf/weight_blocks.h"
#include "util/fp16.h"

#if defined(__x86_64__) && !defined(TKV_NO_VNNI)
// GCC 12's avx512fintrin.h starts several intrinsics (set, cvt, maskz) from
// `__m512 __Y = __Y;`, an undefined vector it then masks away, and warns
// once they are inlined here (as in matmul_int8.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define TKV_KQ_VNNI 1
#define TKV_KQ_ATTR __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#endif

namespace tkv {
namespace {

constexpr uint32_t kQ4K = 12, kQ5K = 13, kQ6K = 14;

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One token's activations per block of 256: d = max|x| / 127, q = round(x / d)
// (half to even), Σq per 32 (Q4_K/Q5_K mins) and per 16 (Q6_K), and the codes
// permuted for Q4_K/Q5_K: per 64 values [sub-block 2p | sub-block 2p + 2]
// with [2p + 1 | 2p + 3] next, matching low and high nibbles of 64 bytes.
struct KActs {
  std::vector<int8_t> q, qp;
  std::vector<float> d;
  std::vector<int32_t> s32, s16;
};

// permute: Q4_K/Q5_K's order (Q6_K reads the codes in their own order).
KActs k_acts(const float* x, int64_t cols, bool permute) {
  KActs a;
  const int64_t nb = cols / 256;
  a.q.resize(cols);
  a.d.resize(nb);
  a.s32.resize(cols / 32);
  a.s16.resize(cols / 16);
  for (int64_t b = 0; b < nb; ++b) quantize_block_q8(x + b * 256, 256, &a.q[b * 256], &a.d[b]);
  for (int64_t i = 0; i < cols / 16; ++i) {
    int32_t s = 0;
    for (int k = 0; k < 16; ++k) s += a.q[i * 16 + k];
    a.s16[i] = s;
  }
  for (int64_t i = 0; i < cols / 32; ++i) a.s32[i] = a.s16[2 * i] + a.s16[2 * i + 1];
  if (!permute) return a;
  a.qp.resize(cols);
  // Q4_K/Q5_K order: for each half h of the block (128 values, sub-blocks
  // 4h..4h+3), vector lo = [sub 4h | sub 4h + 2], vector hi = [sub 4h + 1 | sub 4h + 3].
  for (int64_t b = 0; b < nb; ++b)
    for (int h = 0; h < 2; ++h)
      for (int v = 0; v < 2; ++v)
        for (int k = 0; k < 64; ++k) {
          const int sub = 4 * h + v + (k >= 32 ? 2 : 0);
          a.qp[b * 256 + h * 128 + v * 64 + k] = a.q[b * 256 + sub * 32 + k % 32];
        }
  return a;
}

#ifdef TKV_KQ_VNNI
// Shuffle indices spreading sub-block scales over dword lanes: Q4_K/Q5_K's
// [4h | 4h + 2] and [4h + 1 | 4h + 3], 8 lanes each, for h = 0, 1.
alignas(16) const char kSpread[4][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2},
                                         {1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3},
                                         {4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6},
                                         {5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7}};
// Q6_K's 16 scales, 4 lanes each, for the 4 vectors of a super-block.
alignas(16) const char kSpread6[4][16] = {{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
                                          {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
                                          {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
                                          {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};

// Q4_K and Q5_K: 144 / 176 bytes per super-block.
template <bool kQ5>
TKV_KQ_ATTR float row_q45k(const uint8_t* row, int64_t nb, const KActs& a) {
  constexpr int64_t kBytes = kQ5 ? 176 : 144;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 f = _mm512_setzero_ps();
  float off = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBytes;
    const uint8_t* qs = blk + (kQ5 ? 48 : 16);
    // The 8 six-bit scales as bytes, unpacked in a register (bytes built in
    // memory and loaded back stalled store forwarding: 27 against 42
    // GFLOP/s), then spread to the lanes by shuffles; the mins stay scalar.
    const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));  // 12 bytes used
    const __m128i lo6 = _mm_and_si128(k, _mm_set1_epi8(63));                          // sc0..3 in bytes 0-3
    const __m128i s47 = _mm_or_si128(
        _mm_and_si128(_mm_shuffle_epi8(k, _mm_setr_epi8(-1, -1, -1, -1, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1)),
                      _mm_set1_epi8(0x0F)),
        _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(_mm_shuffle_epi8(k, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1,
                                                                                         -1, -1, -1, -1, -1, -1)),
                                                    6),
                                     _mm_set1_epi8(3)),
                       4));  // sc4..7 in bytes 4-7
    const __m128i sc8 = _mm_blend_epi16(lo6, s47, 0x0C);
    int mn[8];
    for (int j = 0; j < 8; ++j) {
      int unused;
      scale_min_k4(j, blk + 4, unused, mn[j]);
    }
    __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // sub-blocks 4h..4h+3: 64 bytes of nibbles
      const __m512i v = _mm512_loadu_si512(qs + h * 64);
      __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      if (kQ5) {  // the fifth bit of sub-block j is bit j of qh[l]
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
        const __m512i q2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
        const __m512i one = _mm512_set1_epi8(1);
        // lo holds sub-blocks 4h (bytes 0-31) and 4h+2 (32-63); hi 4h+1 and 4h+3.
        const __m512i sh_lo = _mm512_set_epi64(4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h, 4 * h, 4 * h, 4 * h);
        const __m512i sh_hi = _mm512_add_epi64(sh_lo, _mm512_set1_epi64(1));
        const __m512i blo = _mm512_and_si512(_mm512_srlv_epi64(q2, sh_lo), one);
        const __m512i bhi = _mm512_and_si512(_mm512_srlv_epi64(q2, sh_hi), one);
        lo = _mm512_or_si512(lo, _mm512_slli_epi16(blo, 4));
        hi = _mm512_or_si512(hi, _mm512_slli_epi16(bhi, 4));
      }
      const int8_t* xq = a.qp.data() + b * 256 + h * 128;
      const __m512i dlo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xq));
      const __m512i dhi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, _mm512_loadu_si512(xq + 64));
      const __m512i slo = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(sc8, _mm_load_si128(reinterpret_cast<const __m128i*>(kSpread[2 * h]))));
      const __m512i shi = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(sc8, _mm_load_si128(reinterpret_cast<const __m128i*>(kSpread[2 * h + 1]))));
      isum = _mm512_add_epi32(isum, _mm512_add_epi32(_mm512_mullo_epi32(dlo, slo), _mm512_mullo_epi32(dhi, shi)));
    }
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) msum += mn[j] * a.s32[b * 8 + j];
    const float dx = a.d[b];
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(half_at(blk) * dx), f);
    off = std::fma(static_cast<float>(msum), half_at(blk + 2) * dx, off);
  }
  return _mm512_reduce_add_ps(f) - off;
}

// Q6_K: 210 bytes per super-block; codes in natural order, 16 per scale.
TKV_KQ_ATTR float row_q6k(const uint8_t* row, int64_t nb, const KActs& a) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
  __m512 f = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * 210;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const __m128i sc16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
    __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // 128 values: ql[64h..], qh[32h..], scales 8h..8h+7
      const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      // bytes 0-31 take qh's bits 0-1 (values l), 32-63 bits 2-3 (values l + 32);
      // the second vector bits 4-5 and 6-7 (values l + 64, l + 96).
      const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i q0 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh2, m3), 4));
      const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh2, 4), m3), 4));
      const int8_t* xq = a.q.data() + b * 256 + h * 128;
      const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, _mm512_loadu_si512(xq));
      const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q1, _mm512_loadu_si512(xq + 64));
      // Lane l covers values 4l..4l+3: scale index l / 4 (+ 4 for the second vector).
      const __m512i s0 = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc16, _mm_load_si128(reinterpret_cast<const __m128i*>(kSpread6[2 * h]))));
      const __m512i s1 = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc16, _mm_load_si128(reinterpret_cast<const __m128i*>(kSpread6[2 * h + 1]))));
      isum = _mm512_add_epi32(isum, _mm512_add_epi32(_mm512_mullo_epi32(d0, s0), _mm512_mullo_epi32(d1, s1)));
    }
    int32_t osum = 0;  // the codes' offset 32, as an integer: Σ_i sc_i Σq_i
    for (int i = 0; i < 16; ++i) osum += sc[i] * a.s16[b * 16 + i];
    // isum - 32 osum in one lane keeps the step exact and the same for every row.
    isum = _mm512_sub_epi32(isum, _mm512_maskz_set1_epi32(1, 32 * osum));
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(half_at(blk + 208) * a.d[b]), f);
  }
  return _mm512_reduce_add_ps(f);
}

float decode_row(uint32_t type, const uint8_t* row, int64_t nb, const KActs& a) {
  if (type == kQ4K) return row_q45k<false>(row, nb, a);
  if (type == kQ5K) return row_q45k<true>(row, nb, a);
  return row_q6k(row, nb, a);
}
#endif

}  // namespace

bool decode_kquants(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if ((w.type != kQ4K && w.type != kQ5K && w.type != kQ6K) || w.cols % 256 != 0 || n_tok < 1 || !vnni_available())
    return false;
#ifdef TKV_KQ_VNNI
  std::vector<KActs> acts;
  for (int t = 0; t < n_tok; ++t) acts.push_back(k_acts(x + int64_t(t) * w.cols, w.cols, w.type != kQ6K));
  const int64_t nb = w.cols / 256;
#pragma omp parallel for num_threads(threads) schedule(static) if (w.rows * w.cols > 65536)
  for (int64_t r = 0; r < w.rows; ++r)
    for (int t = 0; t < n_tok; ++t) y[int64_t(t) * w.rows + r] = decode_row(w.type, w.data + r * w.row_bytes, nb, acts[t]);
  return true;
#else
  (void)x;
  (void)y;
  (void)threads;
  return false;
#endif
}

}  // namespace tkv
