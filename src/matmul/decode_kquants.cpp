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
// token; vpmaddubsw sums code x activation products in pairs (words), and
// vpdpwssd multiplies each pair by its sub-block's integer scale (spread to
// words by vpermw) and adds pairs into 16 dword lanes, each inside one
// sub-block (llama.cpp's maddubs + madd, with the add fused); then one float
// step per super-block
//   f += float(isum_b) * (d_b * dx_b)   (lane-wise, reduced once per row)
// and the mins (Q4_K/Q5_K, one vpmaddwd of 8 mins by 8 Σq) or the -32
// (Q6_K, folded into isum) as integers per super-block:
//   off += float(Σ_j m_j Σq_j) * (dmin_b * dx_b)   (4 lanes).
// The scalar specification is decode_kquants_ref (float64 from the same
// integers); the kernel differs from it by its f32 rounding only.
//
// AVX2 (no AVX-512: Zen 2/3, older Intel), the same integers on 32 bytes:
// the activations stay in natural order (a 32-byte vector of nibbles is one
// Q4_K sub-block in its low and the next in its high nibbles), vpmaddubsw
// then vpmaddwd by the sub-block's scale broadcast to words (one vpshufb)
// and vpaddd, 8 dword lanes; the mins and Q6_K's -32 as above. Before it an
// AVX2 CPU expanded Q4_K rows to floats with scalar code (row core) and Q6_K
// went through the prefill core one token at a time.
// Each (row, token) does exactly these operations whatever rows and tokens
// share the call, so a token's bits do not depend on the group
// (matmul_tokens), nor on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
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
#define TKV_KQ_ATTR __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define TKV_KQ2_ATTR __attribute__((target("avx2,fma,f16c")))
#endif

namespace tkv {
namespace {

constexpr uint32_t kQ4K = 12, kQ5K = 13, kQ6K = 14;

// One token's activations per block of 256: d = max|x| / 127, q = round(x / d)
// (half to even), Σq per 32 (Q4_K/Q5_K mins) and per 16 (Q6_K) as int16
// (|Σq| <= 32 * 127), and the codes permuted for Q4_K/Q5_K: per 64 values
// [sub-block 2p | sub-block 2p + 2] with [2p + 1 | 2p + 3] next, matching
// low and high nibbles of 64 bytes.
struct KActs {
  std::vector<int8_t> q, qp;
  std::vector<float> d;
  std::vector<int16_t> s32, s16;
};

#ifdef TKV_KQ_VNNI
// quantize_block_q8 on 256 values with AVX-512, bit for bit: the same amax
// (NaN-free order of max), the same d and 1 / d, the product rounded half to
// even (the default rounding mode, as nearbyint) and clamped as a float
// before the conversion (a NaN becomes -127 as there). The scalar loop with
// a nearbyint call per value was 4 % of a one-thread Q4_K token.
TKV_KQ_ATTR void quantize_256(const float* x, int8_t* q, float* d) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 amax = _mm512_setzero_ps();
  for (int i = 0; i < 256; i += 16) amax = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), amax);
  const float db = _mm512_reduce_max_ps(amax) / 127.0f, id = recip_or_zero(db);
  const __m512 vid = _mm512_set1_ps(id), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
  for (int i = 0; i < 256; i += 16) {
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 c = _mm512_min_ps(hi, _mm512_max_ps(r, lo));  // max(NaN, lo) = lo
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(c)));
  }
  *d = db;
}
#endif

#ifdef TKV_KQ_VNNI
// quantize_256 with AVX2, the same bits: the max is exact in any order, the
// rounding the same instruction's (vroundps nearest-even), the clamp the same
// operand order (maxps returns its second operand for a NaN), and the int32
// codes packed to bytes with signed saturation (no-op: |q| <= 127), lanes put
// back in order by one vpermd.
TKV_KQ2_ATTR void quantize_256_avx2(const float* x, int8_t* q, float* d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 256; i += 8) amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), amax);
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float db = _mm_cvtss_f32(m) / 127.0f, id = recip_or_zero(db);
  const __m256 vid = _mm256_set1_ps(id), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < 256; i += 32) {
    __m256i v[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vid),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v[k] = _mm256_cvttps_epi32(_mm256_min_ps(hi, _mm256_max_ps(r, lo)));
    }
    // packs work per 128-bit lane: dwords 0-3 of v0 v1 v2 v3, then 4-7 of each.
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_permutevar8x32_epi32(w, order));
  }
  *d = db;
}
#endif

// permute: Q4_K/Q5_K's order for the AVX-512 kernel (Q6_K and the AVX2
// kernels read the codes in their natural order). avx2: quantize with AVX2
// (the same bits as the AVX-512 and scalar quantizers).
KActs k_acts(const float* x, int64_t cols, bool permute, bool avx2 = false) {
  KActs a;
  const int64_t nb = cols / 256;
  a.q.resize(cols);
  a.d.resize(nb);
  a.s32.resize(cols / 32);
  a.s16.resize(cols / 16);
  for (int64_t b = 0; b < nb; ++b) {
#ifdef TKV_KQ_VNNI
    if (avx2) quantize_256_avx2(x + b * 256, &a.q[b * 256], &a.d[b]);
    else quantize_256(x + b * 256, &a.q[b * 256], &a.d[b]);
#else
    quantize_block_q8(x + b * 256, 256, &a.q[b * 256], &a.d[b]);
#endif
  }
  for (int64_t i = 0; i < cols / 16; ++i) {
    int32_t s = 0;
    for (int k = 0; k < 16; ++k) s += a.q[i * 16 + k];
    a.s16[i] = static_cast<int16_t>(s);
  }
  for (int64_t i = 0; i < cols / 32; ++i) a.s32[i] = static_cast<int16_t>(a.s16[2 * i] + a.s16[2 * i + 1]);
  if (!permute) return a;
  a.qp.resize(cols);
  // Q4_K/Q5_K order: for each half h of the block (128 values, sub-blocks
  // 4h..4h+3), vector lo = [sub 4h | sub 4h + 2], vector hi = [sub 4h + 1 | sub 4h + 3].
  for (int64_t b = 0; b < nb; ++b)
    for (int h = 0; h < 2; ++h)
      for (int v = 0; v < 2; ++v)
        for (int half = 0; half < 2; ++half) {
          const int sub = 4 * h + v + 2 * half;
          std::memcpy(&a.qp[b * 256 + h * 128 + v * 64 + half * 32], &a.q[b * 256 + sub * 32], 32);
        }
  return a;
}

#ifdef TKV_KQ_VNNI
// Indices spreading sub-block scales over the 32 words of a vector of pair
// sums: Q4_K/Q5_K's [4h | 4h + 2] and [4h + 1 | 4h + 3], 16 words each, for
// h = 0, 1, as vpshufb indices on the 8 scale bytes broadcast to every
// 128-bit lane (a word's low byte the scale's, its high byte zeroed by
// 0x80); Q6_K's 16 scales (16-bit, in the low 128 bits; vpermw indices), 8
// words (16 values) each, 4 per vector, for the 4 vectors of a super-block.
struct SpreadIdx {
  alignas(64) uint8_t b4[4][64];
  alignas(64) int16_t k6[4][32];
  SpreadIdx() {
    for (int v = 0; v < 4; ++v)
      for (int w = 0; w < 32; ++w) {
        b4[v][2 * w] = static_cast<uint8_t>(4 * (v / 2) + v % 2 + (w >= 16 ? 2 : 0));
        b4[v][2 * w + 1] = 0x80;
        k6[v][w] = static_cast<int16_t>(4 * v + w / 8);
      }
  }
};
const SpreadIdx kIdx;

// The sub-block scales (bytes 0-7) and mins (bytes 0-7) of a Q4_K/Q5_K
// super-block from its 12 packed bytes k (scale_min_k4): j < 4: sc = k[j] & 63,
// m = k[j + 4] & 63; j >= 4: sc = (k[j + 4] & 15) | (k[j - 4] >> 6) << 4,
// m = (k[j + 4] >> 4) | (k[j] >> 6) << 4. In registers (bytes built in memory
// and loaded back stalled store forwarding; scale_min_k4 called per
// sub-block for the mins was 30 % of a one-thread Q4_K decode).
TKV_KQ2_ATTR inline void scales_mins_k4(const uint8_t* p, __m128i& sc8, __m128i& mn8) {
  const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));  // 12 bytes used
  const __m128i m63 = _mm_set1_epi8(63), m15 = _mm_set1_epi8(15), m3 = _mm_set1_epi8(3);
  const __m128i k0_3 = _mm_shuffle_epi8(k, _mm_setr_epi8(0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m128i k4_7 = _mm_shuffle_epi8(k, _mm_setr_epi8(4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m128i hi0 = _mm_shuffle_epi8(k, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m128i hi4 = _mm_shuffle_epi8(k, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m128i k8 = _mm_shuffle_epi8(k, _mm_setr_epi8(-1, -1, -1, -1, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1));
  // Shifts are per 16 bits; each byte is masked after its shift, and bytes
  // 3 and 4 never share a word, so no bit crosses into a used byte.
  sc8 = _mm_or_si128(_mm_or_si128(_mm_and_si128(k0_3, m63), _mm_and_si128(k8, m15)),
                     _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hi0, 6), m3), 4));
  mn8 = _mm_or_si128(_mm_or_si128(_mm_and_si128(k4_7, m63), _mm_and_si128(_mm_srli_epi16(k8, 4), m15)),
                     _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hi4, 6), m3), 4));
}

// A Q4_K/Q5_K super-block's float step, shared by both kernels: returns
// [d, dmin] * dx in lanes 0, 1 (vcvtph2ps: exact, as f16_to_f32) and adds
// the mins term Σ_j m_j Σq_j (one vpmaddwd of the 8 mins by the 8 Σq) times
// dmin * dx into the 4 lanes of off.
TKV_KQ2_ATTR inline __m128 super_block_step(const uint8_t* blk, __m128i mn8, const KActs& a, int64_t b, __m128& off) {
  uint32_t dd;
  std::memcpy(&dd, blk, 4);
  const __m128 sd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd))), _mm_set1_ps(a.d[b]));
  const __m128i msum =
      _mm_madd_epi16(_mm_cvtepu8_epi16(mn8), _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.s32.data() + b * 8)));
  off = _mm_fmadd_ps(_mm_cvtepi32_ps(msum), _mm_shuffle_ps(sd, sd, 0x55), off);
  return sd;
}

TKV_KQ2_ATTR inline float hsum4(__m128 v) {
  const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Bytes ahead of the loads that the row kernels prefetch (as the float rows
// of matmul.cpp: AMD's stream prefetcher stops at 4 KB pages; past a row's
// end it is the next row's, which the same thread reads next), into L2 as
// there (prefetcht1: prefetcht0 evicted the activations from L1 on Zen 4).
constexpr int64_t kKqPrefetch = 6144;

// Q4_K and Q5_K: 144 / 176 bytes per super-block. Per 64 codes: vpmaddubsw
// (unsigned codes <= 31 times activations |q| <= 127: pair sums <= 7874, no
// saturation) then vpdpwssd with the sub-block scales spread to words, so
// each dword lane gains sc * (4 products) exactly: 2 operations where
// vpdpbusd + vpmulld + vpaddd took 4 uops. The mins: Σ_j m_j Σq_j by one
// vpmaddwd per super-block, kept in 4 float lanes.
template <bool kQ5>
TKV_KQ_ATTR float row_q45k(const uint8_t* row, int64_t nb, const KActs& a) {
  constexpr int64_t kBytes = kQ5 ? 176 : 144;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i i0 = _mm512_load_si512(kIdx.b4[0]), i1 = _mm512_load_si512(kIdx.b4[1]);
  const __m512i i2 = _mm512_load_si512(kIdx.b4[2]), i3 = _mm512_load_si512(kIdx.b4[3]);
  __m512 f = _mm512_setzero_ps();
  __m128 off = _mm_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBytes;
    const uint8_t* qs = blk + (kQ5 ? 48 : 16);
    for (int64_t o = 0; o < kBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kKqPrefetch + o), _MM_HINT_T1);
    __m128i sc8, mn8;
    scales_mins_k4(blk + 4, sc8, mn8);
    // The 8 scale bytes in every 128-bit lane, spread to words by vpshufb
    // (high bytes zeroed by the index's 0x80): where vpmovzxbw and four
    // vpermw did it, a one-thread Q4_K tg16 on a Zen 4 EPYC took 19.8-19.9
    // ms a step, with this 19.4-19.6 (RESULTS §44). The same words.
    const __m512i scb = _mm512_broadcast_i32x4(sc8);
    const __m512i sidx[4] = {i0, i1, i2, i3};
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
      const __m512i plo = _mm512_maddubs_epi16(lo, _mm512_loadu_si512(xq));
      const __m512i phi = _mm512_maddubs_epi16(hi, _mm512_loadu_si512(xq + 64));
      isum = _mm512_dpwssd_epi32(isum, plo, _mm512_shuffle_epi8(scb, sidx[2 * h]));
      isum = _mm512_dpwssd_epi32(isum, phi, _mm512_shuffle_epi8(scb, sidx[2 * h + 1]));
    }
    const __m128 sd = super_block_step(blk, mn8, a, b, off);
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_broadcastss_ps(sd), f);
  }
  return _mm512_reduce_add_ps(f) - hsum4(off);
}

// Q6_K: 210 bytes per super-block; codes in natural order, 16 per scale.
// vpmaddubsw on codes <= 63 (pair sums <= 16002) and vpdpwssd with the signed
// scales; the codes' offset 32 as the integer 32 Σ_i sc_i Σq_i (one vpmaddwd
// over the 16 scales), subtracted in the dword lanes: exact.
TKV_KQ_ATTR float row_q6k(const uint8_t* row, int64_t nb, const KActs& a) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
  const __m512i i0 = _mm512_load_si512(kIdx.k6[0]), i1 = _mm512_load_si512(kIdx.k6[1]);
  const __m512i i2 = _mm512_load_si512(kIdx.k6[2]), i3 = _mm512_load_si512(kIdx.k6[3]);
  __m512 f = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * 210;
    for (int64_t o = 0; o < 210; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kKqPrefetch + o), _MM_HINT_T1);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
    const __m512i sc16 = _mm512_castsi256_si512(sc);
    const __m512i sidx[4] = {i0, i1, i2, i3};
    const __m256i osum = _mm256_madd_epi16(sc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.s16.data() + b * 16)));
    __m512i isum = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(osum, 5)));
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
      const __m512i p0 = _mm512_maddubs_epi16(q0, _mm512_loadu_si512(xq));
      const __m512i p1 = _mm512_maddubs_epi16(q1, _mm512_loadu_si512(xq + 64));
      isum = _mm512_dpwssd_epi32(isum, p0, _mm512_permutexvar_epi16(sidx[2 * h], sc16));
      isum = _mm512_dpwssd_epi32(isum, p1, _mm512_permutexvar_epi16(sidx[2 * h + 1], sc16));
    }
    uint16_t hd;
    std::memcpy(&hd, blk + 208, 2);
    const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(hd)));
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * a.d[b]), f);
  }
  return _mm512_reduce_add_ps(f);
}

// The AVX2 kernels. Word j of a 128-bit lane broadcast to all 8 words of
// the lane: vpshufb controls (bytes 2j, 2j + 1 repeated).
struct WordBcast {
  alignas(32) int8_t w[8][32];
  // Q6_K: lane 0 takes word 2p, lane 1 word 2p + 1 (the two scales of 32 values).
  alignas(32) int8_t q6[4][32];
  WordBcast() {
    for (int j = 0; j < 8; ++j)
      for (int b = 0; b < 32; ++b) w[j][b] = static_cast<int8_t>(2 * j + (b & 1));
    for (int p = 0; p < 4; ++p)
      for (int b = 0; b < 32; ++b) q6[p][b] = static_cast<int8_t>(2 * (2 * p + (b >= 16 ? 1 : 0)) + (b & 1));
  }
};
const WordBcast kBcast;

TKV_KQ2_ATTR inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Q4_K and Q5_K on AVX2: per 32 bytes of nibbles, sub-blocks 2k (low
// nibbles) and 2k + 1 (high) against the activations in natural order;
// vpmaddubsw (codes <= 31 x |q| <= 127: pair sums <= 7874), vpmaddwd by the
// broadcast scale (<= 63), vpaddd: each dword lane gains sc x 4 products,
// exact. Q5_K's fifth bit of sub-block j is bit j of qh[l]: compared to the
// bit and turned into 0x10.
template <bool kQ5>
TKV_KQ2_ATTR float row_q45k_avx2(const uint8_t* row, int64_t nb, const KActs& a) {
  constexpr int64_t kBytes = kQ5 ? 176 : 144;
  const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
  __m256 f = _mm256_setzero_ps();
  __m128 off = _mm_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBytes;
    const uint8_t* qs = blk + (kQ5 ? 48 : 16);
    for (int64_t o = 0; o < kBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kKqPrefetch + o), _MM_HINT_T1);
    __m128i sc8, mn8;
    scales_mins_k4(blk + 4, sc8, mn8);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));  // words 0-7, both lanes
    __m256i qh;
    if (kQ5) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    const int8_t* xq = a.q.data() + b * 256;
    __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * k));
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if (kQ5) {
        const __m256i bl = _mm256_set1_epi8(static_cast<char>(1 << (2 * k)));
        const __m256i bh = _mm256_set1_epi8(static_cast<char>(1 << (2 * k + 1)));
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bl), bl), b4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bh), bh), b4));
      }
      const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 64 * k)));
      const __m256i phi =
          _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 64 * k + 32)));
      const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_load_si256(reinterpret_cast<const __m256i*>(kBcast.w[2 * k])));
      const __m256i shi =
          _mm256_shuffle_epi8(sc16, _mm256_load_si256(reinterpret_cast<const __m256i*>(kBcast.w[2 * k + 1])));
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(plo, slo), _mm256_madd_epi16(phi, shi)));
    }
    const __m128 sd = super_block_step(blk, mn8, a, b, off);
    f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_broadcastss_ps(sd), f);
  }
  return hsum8(f) - hsum4(off);
}

// Q6_K on AVX2: per half h, 64 bytes of ql and 32 of qh give four vectors of
// 32 codes (values 32p + l); the two scales of a vector (16 values each)
// spread over its two 128-bit lanes by one vpshufb of the half's 8 scales.
TKV_KQ2_ATTR float row_q6k_avx2(const uint8_t* row, int64_t nb, const KActs& a) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
  __m256 f = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * 210;
    for (int64_t o = 0; o < 210; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kKqPrefetch + o), _MM_HINT_T1);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
    const __m256i osum = _mm256_madd_epi16(sc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.s16.data() + b * 16)));
    __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(osum, 5));
    const int8_t* xq = a.q.data() + b * 256;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i sch = h == 0 ? _mm256_permute2x128_si256(sc, sc, 0x00) : _mm256_permute2x128_si256(sc, sc, 0x11);
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
      const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(qb, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        const __m256i prod =
            _mm256_maddubs_epi16(q[p], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 128 * h + 32 * p)));
        const __m256i s = _mm256_shuffle_epi8(sch, _mm256_load_si256(reinterpret_cast<const __m256i*>(kBcast.q6[p])));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(prod, s));
      }
    }
    uint16_t hd;
    std::memcpy(&hd, blk + 208, 2);
    const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(hd)));
    f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * a.d[b]), f);
  }
  return hsum8(f);
}

float decode_row(uint32_t type, const uint8_t* row, int64_t nb, const KActs& a) {
  if (type == kQ4K) return row_q45k<false>(row, nb, a);
  if (type == kQ5K) return row_q45k<true>(row, nb, a);
  return row_q6k(row, nb, a);
}

float decode_row_avx2(uint32_t type, const uint8_t* row, int64_t nb, const KActs& a) {
  if (type == kQ4K) return row_q45k_avx2<false>(row, nb, a);
  if (type == kQ5K) return row_q45k_avx2<true>(row, nb, a);
  return row_q6k_avx2(row, nb, a);
}
#endif

}  // namespace

void decode_kquants_ref(const Matrix& w, const float* x, int n_tok, double* y, double* mag) {
  const int64_t nb = w.cols / 256;
  std::vector<int8_t> q(w.cols);
  std::vector<float> dx(nb);
  for (int t = 0; t < n_tok; ++t) {
    for (int64_t b = 0; b < nb; ++b) quantize_block_q8(x + t * w.cols + b * 256, 256, &q[b * 256], &dx[b]);
    for (int64_t r = 0; r < w.rows; ++r) {
      double f = 0, m = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = w.data + r * w.row_bytes + b * weight_block_bytes(w.type);
        const int8_t* xq = &q[b * 256];
        int64_t isum = 0, iabs = 0, msum = 0, mabs = 0;
        double d = 0, dmin = 0;
        if (w.type == kQ6K) {  // ql[128], qh[64], int8 scales[16] per 16 values, f16 d; code = 6 bits - 32
          const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
          for (int c = 0; c < 256; ++c) {
            const int n = c / 128, v = c % 128, l = v % 32, part = v / 32;  // part 0..3: ql nibble and qh bit pair
            const uint8_t ql = blk[64 * n + l + (part & 1) * 32], qh = blk[128 + 32 * n + l];
            const int u = ((part < 2 ? ql & 15 : ql >> 4) | (((qh >> (2 * part)) & 3) << 4)) - 32;
            const int s = sc[c / 16];
            isum += int64_t(s) * u * xq[c];
            iabs += int64_t(std::abs(s)) * std::abs(u) * std::abs(xq[c]);
          }
          d = f16_to_f32(static_cast<uint16_t>(blk[208] | blk[209] << 8));
        } else {  // Q4_K / Q5_K: f16 d, dmin, 12 bytes of 6-bit scales and mins, [Q5_K: qh[32]], qs[128]
          const bool q5 = w.type == kQ5K;
          const uint8_t* qs = blk + (q5 ? 48 : 16);
          for (int j = 0; j < 8; ++j) {
            int sc, mn;
            scale_min_k4(j, blk + 4, sc, mn);
            int32_t sq = 0;
            for (int l = 0; l < 32; ++l) {
              int u = (qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 15;
              if (q5) u |= ((blk[16 + l] >> j) & 1) << 4;
              const int xv = xq[j * 32 + l];
              isum += int64_t(sc) * u * xv;
              iabs += int64_t(sc) * u * std::abs(xv);
              sq += xv;
            }
            msum += int64_t(mn) * sq;
            mabs += int64_t(mn) * std::abs(sq);
          }
          d = f16_to_f32(static_cast<uint16_t>(blk[0] | blk[1] << 8));
          dmin = f16_to_f32(static_cast<uint16_t>(blk[2] | blk[3] << 8));
        }
        f += (double(isum) * d - double(msum) * dmin) * dx[b];
        m += (double(iabs) * std::fabs(d) + double(mabs) * std::fabs(dmin)) * dx[b];
      }
      y[int64_t(t) * w.rows + r] = f;
      if (mag) mag[int64_t(t) * w.rows + r] = m;
    }
  }
}

void decode_kquants_team(const Matrix& w, const float* x, float* y) {
#ifdef TKV_KQ_VNNI
  const bool vnni = vnni_available();
  const KActs a = k_acts(x, w.cols, vnni && w.type != kQ6K, !vnni);
  const int64_t nb = w.cols / 256;
  if (vnni) {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < w.rows; ++r) y[r] = decode_row(w.type, w.data + r * w.row_bytes, nb, a);
  } else {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < w.rows; ++r) y[r] = decode_row_avx2(w.type, w.data + r * w.row_bytes, nb, a);
  }
#else
  (void)w;
  (void)x;
  (void)y;
#endif
}

bool decode_kquants(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if ((w.type != kQ4K && w.type != kQ5K && w.type != kQ6K) || w.cols % 256 != 0 || n_tok < 1) return false;
  const bool vnni = vnni_available();
  if (!vnni && !avx2_decode_available()) return false;
#ifdef TKV_KQ_VNNI
  std::vector<KActs> acts;
  for (int t = 0; t < n_tok; ++t)
    acts.push_back(k_acts(x + int64_t(t) * w.cols, w.cols, vnni && w.type != kQ6K, !vnni));
  const int64_t nb = w.cols / 256;
#pragma omp parallel for num_threads(threads) schedule(static) if (w.rows * w.cols > 65536)
  for (int64_t r = 0; r < w.rows; ++r)
    for (int t = 0; t < n_tok; ++t) {
      const uint8_t* row = w.data + r * w.row_bytes;
      y[int64_t(t) * w.rows + r] = vnni ? decode_row(w.type, row, nb, acts[t]) : decode_row_avx2(w.type, row, nb, acts[t]);
    }
  return true;
#else
  (void)x;
  (void)y;
  (void)threads;
  return false;
#endif
}

}  // namespace tkv
