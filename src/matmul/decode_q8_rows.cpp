// Q8_0 decode with rows in lanes: the one-token kernel and the server's
// decode groups (matmul_tokens) for Q8_0 weights.
//
// Why: a server step decodes one token for each of up to 16+ sequences, and
// the row-streaming kernel (matmul_tiled.cpp) applies the block scales per 64
// weights per token (VNNI dot, convert, two FMAs); at 16 tokens that made the
// step bound by vector operations, not by reading the weights (docs/RESULTS.md
// §11). Here 16 rows sit in the 16 lanes: per 32-column block the rows' codes
// are transposed into 8 vectors (lane r = 4 codes of row r), each token's
// activation dwords are broadcast, the int32 dot of every row with the block
// is completed by 8 VNNI steps, and only then one scale step is taken:
//   f = fma(float(dot), d_w * d_x, f)          (dot exact in int32)
// so the scales cost 3 operations per 512 weights per token instead of 3 per
// 64, and the transposition is shared by all the tokens of a group.
//
// Bits: every (row, token) lane does exactly the operations of
// decode_q8_rows_ref for that row and token, in block order, whatever rows
// share its vector and whatever tokens share its group, so a token decoded
// alone and in a server step gets the same bits.
//
// MXFP4 (gpt-oss's experts, issue 32c) takes the same kernel: per row and
// block the 16 code bytes are expanded to 32 unsigned values kMxfp4[code] + 12
// in 0..24 (E2M1 doubled, ggml's kvalues_mxfp4, offset to be a vpdpbusd
// operand) by one vpshufb table lookup per nibble, in the value order of a
// Q8_0 block, and then go through the same transposition and VNNI steps; the
// offset comes back as -12 Σq, and the E8M0 byte becomes d_w = 2^(e - 128)
// (the table's factor 2 folded in) by integer shifts. llama.cpp's
// ggml_vec_dot_mxfp4_q8_0 computes the same integer block dots.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "matmul/matmul_tiled.h"
#include "gguf/weight_blocks.h"
#include "util/fp16.h"

#if defined(__x86_64__) && !defined(TKV_NO_VNNI)
#include <immintrin.h>
#define TKV_Q8R_VNNI 1
#define TKV_Q8R_ATTR __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define TKV_Q8R2_ATTR __attribute__((target("avx2,fma,f16c")))
#endif

namespace tkv {
namespace {

constexpr int kQ8Block = 34;  // f16 scale + 32 int8 codes
constexpr int kMxBlock = 17;  // E8M0 scale + 16 bytes of E2M1 nibbles
constexpr int kQ40Block = 18;  // f16 scale + 16 bytes of nibbles (value j low, j + 16 high), code - 8
constexpr uint32_t kQ40 = 2;
// kMxfp4[code] + 12 for the 16 codes, once per 128-bit lane (vpshufb).
alignas(64) constexpr int8_t kMxTable[64] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                             12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                             12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                             12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

// One token's activations: codes, block scales d_x and the code sums (for
// the +128 offset of the unsigned weight operand).
struct Q8Acts {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};

Q8Acts q8_acts(const float* x, int64_t cols) {
  Q8Acts a;
  const int64_t nb = cols / 32;
  a.q.resize(cols);
  a.d.resize(nb);
  std::vector<float> s(nb);
  quantize_activations_q8_simd(x, cols, a.q.data(), a.d.data(), s.data());
  a.sum.resize(nb);
  for (int64_t b = 0; b < nb; ++b) {
    int32_t t = 0;
    for (int k = 0; k < 32; ++k) t += a.q[b * 32 + k];
    a.sum[b] = t;
  }
  return a;
}

float f16_scale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return f16_to_f32(h);
}

#ifdef TKV_Q8R_VNNI
// GCC 12 reports the intrinsics' own undefined upper halves
// (_mm512_castsi256_si512, the unpacks) as maybe uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
enum class RowKind { kQ8, kMx, kQ40 };
constexpr int32_t code_offset(RowKind k) { return k == RowKind::kQ40 ? 8 : k == RowKind::kMx ? 12 : 0; }

// 16 rows (row r at base + r * rb; rows past the matrix repeat the last one
// and are not stored) x NT tokens. Q4_0 (K = kQ40) takes MXFP4's nibble
// expansion without the table: the nibbles are the unsigned operands 0..15,
// value = nibble - 8, the offset back as -8 Σq. A one-thread Q4_0 tg16 on a
// Zen 4 EPYC (2026-12-05, RESULTS §44): the former row kernel (one row at a
// time, 11 vector operations per 64 weights) 29.3 ms a step, the AVX2 8-row
// kernel 26.1 ms, this one 19.7.
template <int NT, RowKind K>
TKV_Q8R_ATTR void rows16_tokens(const uint8_t* base, int64_t rb, int nrows, bool more, int64_t nb,
                                const Q8Acts* const* a, float* out, int64_t out_stride) {
  const uint8_t* row[16];
  for (int r = 0; r < 16; ++r) row[r] = base + std::min(r, nrows - 1) * rb;
  constexpr bool kMx = K == RowKind::kMx;
  constexpr bool kNib = K != RowKind::kQ8;  // 16 bytes of nibbles per block
  constexpr int kBlock = kMx ? kMxBlock : K == RowKind::kQ40 ? kQ40Block : kQ8Block;
  // The row in lane j (Q8_0: j; the nibble kinds: j / 4 + 4 (j % 4), the
  // order their transposition leaves) for the scales, and its inverse, the
  // lane of row r, for the store.
  auto rj = [](int j) { return kNib ? (j >> 2) + 4 * (j & 3) : j; };
  auto lane = [](int r) { return kNib ? 4 * (r & 3) + (r >> 2) : r; };
  // MXFP4: kMxfp4[code] + 12 per code (the table in every 128-bit lane).
  const __m512i mx_tbl = _mm512_load_si512(kMxTable);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 f[NT];
  for (int t = 0; t < NT; ++t) f[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t bo = b * kBlock;
    // The 16 rows are one contiguous region read 16 places at a time, which
    // the hardware prefetchers serve poorly (one stream: 22-23 tokens/s on
    // the 1 GB model without this, 28-36 with it); the next group's region
    // is asked for in address order meanwhile, 16 x 34 bytes per block.
    if (more) {  // (the last group has no next region)
      const uint8_t* pf = base + 16 * rb + b * 16 * kBlock;
      for (int l = 0; l < 16 * kBlock; l += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + l), _MM_HINT_T1);
    }
    // w[k] lane j = dword k (codes 4k..4k+3) of row rj(j).
    __m512i w[8];
    if constexpr (kNib) {
      // The 16 rows' 16 code bytes, four rows a vector (128-bit lane L of g[i]
      // = row 4i + L), transposed by dwords inside the lanes (4 + 4 unpacks):
      // dword 4L + e of W_k = dword k of row L + 4e (rj). Byte t of dword k holds
      // value 4k + t in its low nibble and 16 + 4k + t in its high one, so
      // w[k] = W_k & 15 and w[k + 4] = (W_k >> 4) & 15 (MXFP4: through the
      // table). Where the codes went through 8 broadcasts, inserts and shifts
      // then Q8_0's 8x8 dword transposition (24 shuffles), a one-thread Q4_0
      // tg16 took 25.7-26.0 ms a step (with the activations' broadcast below
      // also changed, 19.7).
      constexpr int kCodes = kMx ? 1 : 2;
      auto ld = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + bo + kCodes)); };
      __m512i g[4];
      for (int i = 0; i < 4; ++i)
        g[i] = _mm512_inserti32x4(
            _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(ld(4 * i)), ld(4 * i + 1), 1), ld(4 * i + 2), 2),
            ld(4 * i + 3), 3);
      const __m512i ab_lo = _mm512_unpacklo_epi32(g[0], g[1]), ab_hi = _mm512_unpackhi_epi32(g[0], g[1]);
      const __m512i cd_lo = _mm512_unpacklo_epi32(g[2], g[3]), cd_hi = _mm512_unpackhi_epi32(g[2], g[3]);
      const __m512i W[4] = {_mm512_unpacklo_epi64(ab_lo, cd_lo), _mm512_unpackhi_epi64(ab_lo, cd_lo),
                            _mm512_unpacklo_epi64(ab_hi, cd_hi), _mm512_unpackhi_epi64(ab_hi, cd_hi)};
      for (int k = 0; k < 4; ++k) {
        const __m512i nlo = _mm512_and_si512(W[k], m4), nhi = _mm512_and_si512(_mm512_srli_epi16(W[k], 4), m4);
        w[k] = kMx ? _mm512_shuffle_epi8(mx_tbl, nlo) : nlo;
        w[k + 4] = kMx ? _mm512_shuffle_epi8(mx_tbl, nhi) : nhi;
      }
    } else {
      // z[i] = [row i codes | row i + 8 codes] (8 dwords each), as u8 (+128).
      const __m512i bias = _mm512_set1_epi8(-128);
      __m512i z[8];
      for (int i = 0; i < 8; ++i)
        z[i] = _mm512_xor_si512(
            _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[i] + bo + 2))),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[i + 8] + bo + 2)), 1),
            bias);
      // 8x8 dword transpose inside each 256-bit half, then lanes regrouped
      // (qword indices that gather [u.lane j, v.lane j, u.lane j+2, v.lane j+2]).
      const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
      __m512i t[8], u[8];
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
      }
      for (int h = 0; h < 2; ++h) {  // rows 0-3 (h = 0) and 4-7 (h = 1) of each half
        const __m512i* th = t + 4 * h;
        u[4 * h + 0] = _mm512_unpacklo_epi64(th[0], th[2]);  // dwords 0 | 4
        u[4 * h + 1] = _mm512_unpackhi_epi64(th[0], th[2]);  // 1 | 5
        u[4 * h + 2] = _mm512_unpacklo_epi64(th[1], th[3]);  // 2 | 6
        u[4 * h + 3] = _mm512_unpackhi_epi64(th[1], th[3]);  // 3 | 7
      }
      for (int k = 0; k < 4; ++k) {
        w[k] = _mm512_permutex2var_epi64(u[k], lo, u[4 + k]);
        w[k + 4] = _mm512_permutex2var_epi64(u[k], hi, u[4 + k]);
      }
    }
    // Row scales built in a register: 16 two-byte stores then a vector load
    // stalled store forwarding every block (one stream 28 -> 40 tokens/s).
    auto h = [&](int j) {
      uint16_t v;
      std::memcpy(&v, row[rj(j)] + bo, 2);
      return static_cast<short>(v);
    };
    __m512 dw;
    if constexpr (kMx) {
      // 2^(e - 128) (mxfp4_scale): bits (e - 1) << 23 from e = 2, the
      // subnormals 0x00200000 << e for e = 0 and 1.
      auto eb = [&](int j) { return static_cast<char>(row[rj(j)][bo]); };
      const __m512i e = _mm512_cvtepu8_epi32(_mm_setr_epi8(eb(0), eb(1), eb(2), eb(3), eb(4), eb(5), eb(6), eb(7), eb(8),
                                                           eb(9), eb(10), eb(11), eb(12), eb(13), eb(14), eb(15)));
      const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
      const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
      dw = _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, sub));
    } else {
      dw = _mm512_cvtph_ps(_mm256_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7), h(8), h(9), h(10), h(11),
                                             h(12), h(13), h(14), h(15)));
    }
    for (int tk = 0; tk < NT; ++tk) {
      const int8_t* q = a[tk]->q.data() + b * 32;
      // Activation dwords broadcast from memory (one load each: from a
      // general register it is a move and a shuffle).
#define TKV_XQ(k) _mm512_castps_si512(_mm512_broadcastss_ps(_mm_load_ss(reinterpret_cast<const float*>(q + 4 * (k)))))
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      for (int k = 0; k < 8; k += 2) {
        s0 = _mm512_dpbusd_epi32(s0, w[k], TKV_XQ(k));
        s1 = _mm512_dpbusd_epi32(s1, w[k + 1], TKV_XQ(k + 1));
      }
#undef TKV_XQ
      const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32((kNib ? code_offset(K) : 128) * a[tk]->sum[b]));
      f[tk] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_set1_ps(a[tk]->d[b])), f[tk]);
    }
  }
  alignas(64) float o[16];
  for (int tk = 0; tk < NT; ++tk) {
    _mm512_store_ps(o, f[tk]);
    for (int r = 0; r < nrows; ++r) out[tk * out_stride + r] = o[lane(r)];
  }
}
// ---- AVX2: 8 rows in the 8 lanes (no AVX-512: Zen 2/3, older Intel) ----
// Per block and row, the 32 codes dotted with the activations: Q8_0's signed
// bytes w by llama.cpp's AVX2 trick vpmaddubsw(|w|, sign(q, w)) (|w| <= 128,
// |q| <= 127: pair sums <= 32512, exact); Q4_0's nibbles u and MXFP4's
// kMxfp4[code] + 12 (vpshufb) as unsigned operands (u <= 24: no saturation),
// the offset taken back as 8 Σq or 12 Σq (two sign operations and, for Q4_0,
// a subtraction fewer a row: Q4_0 tg32 on two threads 30.6 -> 33.4 tokens/s,
// one thread 19.7 -> 20.1, RESULTS §32); vpmaddwd by
// ones; the 8 rows' 8 dwords summed across by two levels of vphaddd and one
// lane exchange, so lane r holds row r's exact block dot; then the scale step
// of the specification
//   f = fma(float(dot), d_w * d_x, f)
// in block order: every (row, token) lane gives decode_q8_rows_ref's bits.

// Q4_0 / MXFP4: the unsigned operand and its offset (value = operand - offset).
template <RowKind K>
TKV_Q8R2_ATTR inline __m256i codes_avx2(const uint8_t* blk) {
  if constexpr (K == RowKind::kQ8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (K == RowKind::kMx ? 1 : 2)));
    const __m256i n = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c, 4), c), _mm256_set1_epi8(0x0F));
    if constexpr (K == RowKind::kMx) {
      return _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(kMxTable)), n);
    } else {
      return n;
    }
  }
}
template <int NT, RowKind K>
TKV_Q8R2_ATTR void rows8_tokens_avx2(const uint8_t* base, int64_t rb, int nrows, bool more, int64_t nb,
                                     const Q8Acts* const* a, float* out, int64_t out_stride) {
  constexpr int kBlock = K == RowKind::kQ8 ? kQ8Block : K == RowKind::kMx ? kMxBlock : kQ40Block;
  const uint8_t* row[8];
  for (int r = 0; r < 8; ++r) row[r] = base + std::min(r, nrows - 1) * rb;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f[NT];
  for (int t = 0; t < NT; ++t) f[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t bo = b * kBlock;
    if (more) {  // the next group's region, in address order (as the AVX-512 kernel)
      const uint8_t* pf = base + 8 * rb + b * 8 * kBlock;
      for (int l = 0; l < 8 * kBlock; l += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + l), _MM_HINT_T1);
    }
    __m256i w[8], aw[8];  // Q8_0: codes and |codes|; else aw = the unsigned operands
    for (int i = 0; i < 8; ++i) {
      if constexpr (K == RowKind::kQ8) {
        w[i] = codes_avx2<K>(row[i] + bo);
        aw[i] = _mm256_sign_epi8(w[i], w[i]);
      } else {
        aw[i] = codes_avx2<K>(row[i] + bo);
      }
    }
    __m256 dw;
    if constexpr (K == RowKind::kMx) {
      const __m256i e = _mm256_setr_epi32(row[0][bo], row[1][bo], row[2][bo], row[3][bo], row[4][bo], row[5][bo],
                                          row[6][bo], row[7][bo]);
      const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
      const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
      dw = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
    } else {
      auto h = [&](int r) {
        uint16_t v;
        std::memcpy(&v, row[r] + bo, 2);
        return static_cast<short>(v);
      };
      dw = _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)));
    }
    for (int tk = 0; tk < NT; ++tk) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[tk]->q.data() + b * 32));
      __m256i s[8];
      for (int i = 0; i < 8; ++i) {
        const __m256i qs = K == RowKind::kQ8 ? _mm256_sign_epi8(q, w[i]) : q;
        s[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[i], qs), ones);
      }
      // Per 128-bit lane: [r0 r1 r2 r3] of the low dwords' sums, then the high.
      const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
      const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
      __m256i dot = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
      if constexpr (K != RowKind::kQ8) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(code_offset(K) * a[tk]->sum[b]));
      f[tk] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(a[tk]->d[b])), f[tk]);
    }
  }
  alignas(32) float o[8];
  for (int tk = 0; tk < NT; ++tk) {
    _mm256_store_ps(o, f[tk]);
    for (int r = 0; r < nrows; ++r) out[tk * out_stride + r] = o[r];
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

void decode_q8_rows_ref(const Matrix& w, const float* x, int n_tok, float* y) {
  const int64_t nb = w.cols / 32;
  for (int t = 0; t < n_tok; ++t) {
    const Q8Acts a = q8_acts(x + t * w.cols, w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      const uint8_t* row = w.data + r * w.row_bytes;
      float f = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t dot = 0;
        float dw;
        if (w.type == kMxfp4Type) {  // value k: kMxfp4[code k] * 2^(e - 128)
          const uint8_t* blk = row + b * kMxBlock;
          for (int k = 0; k < 16; ++k) {
            dot += int32_t(kMxfp4[blk[1 + k] & 15]) * a.q[b * 32 + k];
            dot += int32_t(kMxfp4[blk[1 + k] >> 4]) * a.q[b * 32 + 16 + k];
          }
          dw = mxfp4_scale(blk[0]);
        } else if (w.type == kQ40) {  // value k: (nibble - 8) * d
          const uint8_t* blk = row + b * kQ40Block;
          for (int k = 0; k < 16; ++k) {
            dot += (int32_t(blk[2 + k] & 15) - 8) * a.q[b * 32 + k];
            dot += (int32_t(blk[2 + k] >> 4) - 8) * a.q[b * 32 + 16 + k];
          }
          dw = f16_scale(blk);
        } else {
          const int8_t* wq = reinterpret_cast<const int8_t*>(row + b * kQ8Block + 2);
          for (int k = 0; k < 32; ++k) dot += int32_t(wq[k]) * a.q[b * 32 + k];
          dw = f16_scale(row + b * kQ8Block);
        }
        f = std::fma(static_cast<float>(dot), dw * a.d[b], f);
      }
      y[t * w.rows + r] = f;
    }
  }
}

namespace {
#ifdef TKV_Q8R_VNNI
// The AVX-512 kernel of the weight type for one group of up to 16 rows and NT tokens.
template <int NT>
void rows16(uint32_t type, const uint8_t* base, int64_t rb, int nr, bool more, int64_t nb, const Q8Acts* const* at,
            float* out, int64_t out_stride) {
  if (type == kMxfp4Type) rows16_tokens<NT, RowKind::kMx>(base, rb, nr, more, nb, at, out, out_stride);
  else if (type == kQ40) rows16_tokens<NT, RowKind::kQ40>(base, rb, nr, more, nb, at, out, out_stride);
  else rows16_tokens<NT, RowKind::kQ8>(base, rb, nr, more, nb, at, out, out_stride);
}

// The AVX2 kernel for one group of up to 8 rows and a tile of up to 4 tokens.
void rows8_avx2(uint32_t type, int nt, const uint8_t* base, int64_t rb, int nr, bool more, int64_t nb,
                const Q8Acts* const* at, float* out, int64_t out_stride) {
#define TKV_Q8R2_KIND(NT)                                                                                      \
  (type == kMxfp4Type ? rows8_tokens_avx2<NT, RowKind::kMx>(base, rb, nr, more, nb, at, out, out_stride)   \
   : type == kQ40     ? rows8_tokens_avx2<NT, RowKind::kQ40>(base, rb, nr, more, nb, at, out, out_stride) \
                      : rows8_tokens_avx2<NT, RowKind::kQ8>(base, rb, nr, more, nb, at, out, out_stride))
  switch (nt) {
    case 1: TKV_Q8R2_KIND(1); break;
    case 2: TKV_Q8R2_KIND(2); break;
    case 3: TKV_Q8R2_KIND(3); break;
    default: TKV_Q8R2_KIND(4); break;
  }
#undef TKV_Q8R2_KIND
}
#endif
}  // namespace

bool decode_q8_rows_avx2_used(uint32_t type) {
  return (type == 8 || type == kMxfp4Type || type == kQ40) && !vnni_available() && avx2_decode_available();
}

bool decode_q8_rows_takes(uint32_t type) {
  return type == 8 || type == kMxfp4Type || (type == kQ40 && (vnni_available() || decode_q8_rows_avx2_used(type)));
}

void decode_q8_rows_team(const Matrix& w, const float* x, float* y) {
#ifdef TKV_Q8R_VNNI
  const Q8Acts a = q8_acts(x, w.cols);
  const Q8Acts* ap = &a;
  if (!vnni_available()) {
    const int64_t nb = w.cols / 32, groups = (w.rows + 7) / 8;
#pragma omp for schedule(static) nowait
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = g * 8;
      const int nr = static_cast<int>(std::min<int64_t>(8, w.rows - r0));
      rows8_avx2(w.type, 1, w.data + r0 * w.row_bytes, w.row_bytes, nr, g + 1 < groups, nb, &ap, y + r0, w.rows);
    }
    return;
  }
  const int64_t nb = w.cols / 32, groups = (w.rows + 15) / 16;
#pragma omp for schedule(static) nowait
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = g * 16;
    const int nr = static_cast<int>(std::min<int64_t>(16, w.rows - r0));
    const uint8_t* base = w.data + r0 * w.row_bytes;
    rows16<1>(w.type, base, w.row_bytes, nr, g + 1 < groups, nb, &ap, y + r0, w.rows);
  }
#else
  (void)w;
  (void)x;
  (void)y;
#endif
}

bool decode_q8_rows(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if (w.cols % 32 != 0 || n_tok < 1) return false;
  const bool avx2 = decode_q8_rows_avx2_used(w.type);
  if (!avx2 && ((w.type != 8 && w.type != kMxfp4Type && w.type != kQ40) || !vnni_available())) return false;
#ifdef TKV_Q8R_VNNI
  std::vector<Q8Acts> acts;
  for (int t = 0; t < n_tok; ++t) acts.push_back(q8_acts(x + t * w.cols, w.cols));
  std::vector<const Q8Acts*> ap;
  for (const auto& a : acts) ap.push_back(&a);
  if (avx2) {
    // 8 rows x up to 4 tokens: 4 f32 accumulators, 8 code and 8 |code|
    // vectors would spill past AVX2's 16 registers at more tokens anyway.
    const int64_t nb = w.cols / 32, groups = (w.rows + 7) / 8;
#pragma omp parallel for num_threads(threads) schedule(static) if (w.rows * w.cols > 65536)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = g * 8;
      const int nr = static_cast<int>(std::min<int64_t>(8, w.rows - r0));
      for (int t0 = 0; t0 < n_tok; t0 += 4)
        rows8_avx2(w.type, std::min(4, n_tok - t0), w.data + r0 * w.row_bytes, w.row_bytes, nr, g + 1 < groups, nb,
                   ap.data() + t0, y + int64_t(t0) * w.rows + r0, w.rows);
    }
    return true;
  }
  const int64_t nb = w.cols / 32, groups = (w.rows + 15) / 16;
#pragma omp parallel for num_threads(threads) schedule(static) if (w.rows * w.cols > 65536)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = g * 16;
    const int nr = static_cast<int>(std::min<int64_t>(16, w.rows - r0));
    const uint8_t* base = w.data + r0 * w.row_bytes;
    for (int t0 = 0; t0 < n_tok; t0 += 8) {  // 8 accumulators + 8 code vectors + temporaries in the 32 zmm
      const Q8Acts* const* at = ap.data() + t0;
      float* out = y + int64_t(t0) * w.rows + r0;
#define TKV_Q8R_RUN(NT) rows16<NT>(w.type, base, w.row_bytes, nr, g + 1 < groups, nb, at, out, w.rows)
      switch (std::min(8, n_tok - t0)) {
        case 1: TKV_Q8R_RUN(1); break;
        case 2: TKV_Q8R_RUN(2); break;
        case 3: TKV_Q8R_RUN(3); break;
        case 4: TKV_Q8R_RUN(4); break;
        case 5: TKV_Q8R_RUN(5); break;
        case 6: TKV_Q8R_RUN(6); break;
        case 7: TKV_Q8R_RUN(7); break;
        default: TKV_Q8R_RUN(8); break;
      }
#undef TKV_Q8R_RUN
    }
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
