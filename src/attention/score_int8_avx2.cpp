// The integer path's AVX2 kernels (score_int8.h) for CPUs without AVX-512
// VBMI + VNNI (Zen 2/3, Intel client cores): the specification's integers
// from vpshufb lookups and vpmaddwd on 16-bit words.
//
// Why words: AVX2's byte product (vpmaddubsw) saturates at 2 · 255 · 127 >
// 32767, so the specification's unsigned centroid byte times the query byte
// cannot be summed in pairs on 16 bits; widened to words (one unpack per 16
// coordinates, shared by every query) vpmaddwd sums pairs on 32 bits
// exactly. Where the centroid bytes are narrow (Int8Keys::narrow: tq2, tq3,
// |c8| <= 31) the bytes themselves go to vpmaddubsw, two products summed on
// 16 bits before one widening (dot_bytes, values_quads): half the multiplies
// and half the staged bytes. Bit for bit the same integers as int8_dots_ref,
// int8_dots16_ref and int8_values_ref (tests/attention/score_int8_test.cpp).
//
// Per row, per 32 coordinates: the codes in natural order (a few shifts,
// masks and unpacks per plane), one vpshufb to centroid bytes (two for the
// 16-bit table), two unpacks to words; per query two vpmaddwd and two adds.
// The f32 path spends two vpermps, a compare and a blend per 8 coordinates
// of a row to decode them, then one FMA per query (RESULTS §31).
// tq2 keys: pair tables on the rows' bytes transposed per block
// (int8_lut_dots_avx2, at the end; RESULTS §42); tq2 values: pair tables of
// two rows' weighted centroids (int8_vlut_values_avx2, the last; §43).
#include "attention/score_int8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <memory>
#include <type_traits>

#include "codec/kernels.h"

#if defined(__x86_64__) && !defined(TKV_NO_INT8_KEYS)
#include <immintrin.h>

namespace tkv::attn {

#define TKV_AVX2_INT8 __attribute__((target("avx2,fma,bmi,bmi2,popcnt")))

bool int8_avx2_cpu() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

namespace {

constexpr int kMaxRows = 32;  // rows one call stages at a time (a block)

inline int chunks32(int dp) { return (dp + 31) / 32; }

// 32 codes of one plane in natural order: coordinates c .. c+31 of its part
// (c a multiple of 32), from the plane's bytes at src = plane + c·W/8 (4·W
// bytes; nothing past them is read). Fields fill each byte from its low bits
// (codec/kernels.h pack_plane): coordinate 8/W·b + i is field i of byte b.
template <int W>
TKV_AVX2_INT8 inline __m256i plane32(const uint8_t* src) {
  if constexpr (W == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  } else if constexpr (W == 4) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  } else if constexpr (W == 2) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
    const __m128i m = _mm_set1_epi8(3);
    const __m128i f0 = _mm_and_si128(b, m), f1 = _mm_and_si128(_mm_srli_epi16(b, 2), m);
    const __m128i f2 = _mm_and_si128(_mm_srli_epi16(b, 4), m), f3 = _mm_and_si128(_mm_srli_epi16(b, 6), m);
    const __m128i u01 = _mm_unpacklo_epi8(f0, f1), u23 = _mm_unpacklo_epi8(f2, f3);
    return _mm256_set_m128i(_mm_unpackhi_epi16(u01, u23), _mm_unpacklo_epi16(u01, u23));
  } else {
    static_assert(W == 1, "plane widths are 1, 2, 4 or 8");
    int32_t v;
    std::memcpy(&v, src, 4);
    // Byte i of the result is bit i % 8 of source byte i / 8.
    const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    const __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(v), idx), bit);
    return _mm256_min_epu8(x, _mm256_set1_epi8(1));
  }
}

TKV_AVX2_INT8 inline __m256i plane32_any(int w, const uint8_t* src) {
  switch (w) {
    case 8: return plane32<8>(src);
    case 4: return plane32<4>(src);
    case 2: return plane32<2>(src);
    default: return plane32<1>(src);
  }
}

// The codes of one row in natural order: codes[i] for i in every part
// (coordinates no part covers are left as they are).
TKV_AVX2_INT8 void row_codes(const RowLayout& L, const uint8_t* row, uint8_t* codes) {
  for (int p = 0; p < L.nparts; ++p) {
    const RowLayout::Part& part = L.parts[p];
    const int whole = part.count / 32 * 32;
    for (int c = 0; c < whole; c += 32) {
      __m256i code = _mm256_setzero_si256();
      for (int pl = 0; pl < part.nplanes; ++pl) {
        const RowLayout::Plane& plane = part.planes[pl];
        __m256i v = plane32_any(plane.width, row + plane.offset + static_cast<size_t>(c) * plane.width / 8);
        // Fields below 2^8 after the shift (a code has at most 8 bits): no
        // bit crosses into the next byte of the 16-bit lane.
        v = _mm256_sll_epi16(v, _mm_cvtsi32_si128(plane.shift));
        code = _mm256_or_si256(code, v);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + part.begin + c), code);
    }
    if (whole < part.count) {  // the tail: whole bytes from here on (32 coordinates end on a byte)
      std::memset(codes + part.begin + whole, 0, static_cast<size_t>(part.count - whole));
      for (int pl = 0; pl < part.nplanes; ++pl) {
        const RowLayout::Plane& plane = part.planes[pl];
        unpack_plane_or(row + plane.offset + static_cast<size_t>(whole) * plane.width / 8, part.count - whole,
                        plane.width, plane.shift, codes + part.begin + whole);
      }
    }
  }
}

// bytes[i] = table[codes[i]] over coordinates [b, e) of one part: one vpshufb
// a 32 for codes of up to 4 bits, a tree of blends over 2 or 4 lookups for 5
// and 6, the table itself for 7 and 8.
TKV_AVX2_INT8 void lookup(const uint8_t* table, int bits, const uint8_t* codes, int b, int e, uint8_t* bytes) {
  int i = b;
  if (bits <= 6) {
    const int nt = bits <= 4 ? 1 : 1 << (bits - 4);
    __m256i t[4];
    for (int k = 0; k < nt; ++k)
      t[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * k)));
    for (; i + 32 <= e; i += 32) {
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i));
      __m256i v;
      if (nt == 1) {
        v = _mm256_shuffle_epi8(t[0], c);
      } else {
        // vpshufb reads index bits 0-3 (bit 7 clear: codes < 64); the blend
        // reads bit 7 of each byte: bit 4 moved there, then bit 5.
        __m256i l[4];
        for (int k = 0; k < nt; ++k) l[k] = _mm256_shuffle_epi8(t[k], c);
        const __m256i s4 = _mm256_slli_epi16(c, 3);
        l[0] = _mm256_blendv_epi8(l[0], l[1], s4);
        if (nt == 4) {
          l[2] = _mm256_blendv_epi8(l[2], l[3], s4);
          l[0] = _mm256_blendv_epi8(l[0], l[2], _mm256_slli_epi16(c, 2));
        }
        v = l[0];
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bytes + i), v);
    }
  }
  for (; i < e; ++i) bytes[i] = table[codes[i]];
}

// Layouts of one part over all of dp (a multiple of 32) with codes of up to
// 4 bits in one plane or a 2-bit plane and a 1-bit plane above it (tq2, tq3,
// tq4 at d 64, 128, 256): the codes of a row straight from its planes to a
// lookup, no loop over parts and planes (the generic row_codes was 40% of
// the integer path at 64K). Returns W0·10 + W1, or 0 for other layouts.
int fixed_sig(const Int8Keys& k, const RowLayout& L) {
  if (L.nparts != 1 || k.dp % 32 != 0 || k.dp > 1024) return 0;
  const RowLayout::Part& p = L.parts[0];
  if (p.begin != 0 || p.count != k.dp || p.bits > 4 || p.planes[0].shift != 0) return 0;
  const int w0 = p.planes[0].width;
  if (p.nplanes == 1 && (w0 == 4 || w0 == 2 || w0 == 1)) return 10 * w0;
  if (p.nplanes == 2 && w0 == 2 && p.planes[1].width == 1 && p.planes[1].shift == 2) return 21;
  return 0;
}

template <int W0, int W1>
TKV_AVX2_INT8 inline __m256i codes_fixed(const uint8_t* row, size_t o0, size_t o1, int c) {
  __m256i code = plane32<W0>(row + o0 + static_cast<size_t>(c) * 4 * W0);
  if constexpr (W1 != 0)
    code = _mm256_or_si256(code, _mm256_slli_epi16(plane32<W1>(row + o1 + static_cast<size_t>(c) * 4 * W1), W0));
  return code;
}

// Calls fn(w0, w1) with the fixed layout's plane widths as constants; false
// for other layouts.
template <class Fn>
TKV_AVX2_INT8 bool with_fixed(int sig, Fn&& fn) {
  switch (sig) {
    case 40: fn(std::integral_constant<int, 4>(), std::integral_constant<int, 0>()); return true;
    case 20: fn(std::integral_constant<int, 2>(), std::integral_constant<int, 0>()); return true;
    case 10: fn(std::integral_constant<int, 1>(), std::integral_constant<int, 0>()); return true;
    case 21: fn(std::integral_constant<int, 2>(), std::integral_constant<int, 1>()); return true;
    default: return false;
  }
}

// The ordered decode (Int8Keys::avx2_sig; the order in score_int8.h): the
// centroid bytes of positions 64c .. 64c+31 (lo) and 64c+32 .. 64c+63 (hi)
// of one row, vpshufb reading the plane bytes where they lie. 2-bit plane:
// its 16 bytes in both 128-bit lanes; byte b's bits 2s, 2s+1 hold code
// 4b+s; lane 0's table reads the low 2 bits of a nibble (s = 0, 2), lane
// 1's the high 2 (s = 1, 3). A 1-bit plane (bit 4b+s of the chunk's 8
// bytes) is spread to H (byte b, bit s) by one widening and a shift, and
// its bit put beside the code's: bit 2 in lane 0 (s = 0, 2), bit 1 in lane
// 1 (s = 1, 3), by per-lane shifts and masks. 4-bit plane: 32 bytes, low
// nibbles (coordinates 2b) then high (2b+1). ~5 operations per 64 codes
// for tq2, ~16 for tq3, against ~24 and ~38 of the natural decode.
template <int SIG>
TKV_AVX2_INT8 inline void bytes64(const uint8_t* row, size_t o0, size_t o1, int c, __m256i tab, __m256i& lo,
                                  __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if constexpr (SIG == 40) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + o0 + 32 * static_cast<size_t>(c)));
    lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
    hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
  } else {
    const __m256i v = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + o0 + 16 * static_cast<size_t>(c))));
    const __m256i v4 = _mm256_srli_epi16(v, 4);  // (the next byte's low bits land in bits 4-7: masked)
    if constexpr (SIG == 20) {
      lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
      hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(v4, m4));
    } else {
      static_assert(SIG == 21, "ordered layouts: 20, 21, 40");
      const __m128i z = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + o1 + 8 * static_cast<size_t>(c))));
      // Word w = plane byte w: its low nibble to byte 2w, its high nibble to byte 2w + 1.
      const __m128i h = _mm_and_si128(_mm_or_si128(z, _mm_slli_epi16(z, 4)), _mm_set1_epi8(0x0F));
      const __m256i mcode = _mm256_setr_epi64x(0x0303030303030303LL, 0x0303030303030303LL, 0x0C0C0C0C0C0C0C0CLL,
                                               0x0C0C0C0C0C0C0C0CLL);
      const __m256i mhigh = _mm256_setr_epi64x(0x0404040404040404LL, 0x0404040404040404LL, 0x0202020202020202LL,
                                               0x0202020202020202LL);
      // s = 0 | 1: H's bit 0 up to bit 2 | bit 1 where it is; s = 2 | 3: bit 2 where it is | bit 3 down to bit 1
      // (shifts on 128 bits, then one insert: vpsllvd / vpsrlvd were 11 % of the V decode on Zen 1).
      const __m256i up = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_slli_epi16(h, 2)), h, 1);
      const __m256i down = _mm256_inserti128_si256(_mm256_castsi128_si256(h), _mm_srli_epi16(h, 2), 1);
      lo = _mm256_shuffle_epi8(tab, _mm256_or_si256(_mm256_and_si256(v, mcode), _mm256_and_si256(up, mhigh)));
      hi = _mm256_shuffle_epi8(tab, _mm256_or_si256(_mm256_and_si256(v4, mcode), _mm256_and_si256(down, mhigh)));
    }
  }
}

// Calls fn(sig) with an ordered layout's signature as a constant.
template <class Fn>
TKV_AVX2_INT8 void with_ordered(int sig, Fn&& fn) {
  switch (sig) {
    case 20: return fn(std::integral_constant<int, 20>());
    case 21: return fn(std::integral_constant<int, 21>());
    default: return fn(std::integral_constant<int, 40>());
  }
}

// Calls fn(nj) with a group's query count (1-4) as a constant: the kernels
// take a last group of 1-3 queries alone (with 4 always, G = 1 or 2 paid for 4).
template <class Fn>
TKV_AVX2_INT8 void with_count(int nj, Fn&& fn) {
  switch (nj) {
    case 4: return fn(std::integral_constant<int, 4>());
    case 3: return fn(std::integral_constant<int, 3>());
    case 2: return fn(std::integral_constant<int, 2>());
    default: return fn(std::integral_constant<int, 1>());
  }
}

// bytes64 with a layout's plane offsets and one of its two tables (K's
// unsigned, V's signed).
template <int SIG>
struct Ordered {
  size_t o0, o1;
  __m256i tab;
  TKV_AVX2_INT8 Ordered(const RowLayout& L, const uint8_t* table)
      : o0(L.parts[0].planes[0].offset),
        o1(SIG == 21 ? L.parts[0].planes[1].offset : 0),
        tab(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(table))) {}
  TKV_AVX2_INT8 void operator()(const uint8_t* row, int c, __m256i& lo, __m256i& hi) const {
    bytes64<SIG>(row, o0, o1, c, tab, lo, hi);
  }
};

// int8_dots2_avx2's words in the order: [nr][nch] chunks of A then B words.
template <int SIG>
TKV_AVX2_INT8 void words_ordered(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int nr,
                                 int16_t* words) {
  const Ordered<SIG> bytes(L, k.avx2_table);
  const __m256i zero = _mm256_setzero_si256();
  __m256i* out = reinterpret_cast<__m256i*>(words);
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < k.dp / 64; ++c, out += 4) {
      __m256i lo, hi;
      bytes(rows[r], c, lo, hi);
      _mm256_store_si256(out, _mm256_unpacklo_epi8(lo, zero));
      _mm256_store_si256(out + 1, _mm256_unpackhi_epi8(lo, zero));
      _mm256_store_si256(out + 2, _mm256_unpacklo_epi8(hi, zero));
      _mm256_store_si256(out + 3, _mm256_unpackhi_epi8(hi, zero));
    }
}

// The narrow keys' bytes (c8 + 32) in the order: [nr][dp].
template <int SIG>
TKV_AVX2_INT8 void bytes_ordered(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int nr,
                                 uint8_t* stage) {
  const Ordered<SIG> bytes(L, k.avx2_ntable);
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < k.dp / 64; ++c) {
      __m256i lo, hi;
      bytes(rows[r], c, lo, hi);
      __m256i* out = reinterpret_cast<__m256i*>(stage + static_cast<size_t>(r) * k.dp + 64 * static_cast<size_t>(c));
      _mm256_store_si256(out, lo);
      _mm256_store_si256(out + 1, hi);
    }
}

// The words of a fixed layout's rows straight from their codes, [nr][nch]
// chunks of A then B words: the table's bytes (c8 + 128) widened with zeros,
// or (WIDE) a 16-bit table's low and high bytes joined; with TWO also the
// second table's into words2 (the codes unpacked once).
template <int W0, int W1, bool WIDE, bool TWO>
TKV_AVX2_INT8 void words_fixed(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int nr, __m256i t0,
                               __m256i t1, int16_t* words, int16_t* words2) {
  const RowLayout::Part& p = L.parts[0];
  const size_t o0 = p.planes[0].offset, o1 = W1 ? p.planes[1].offset : 0;
  const int nch = k.dp / 32;
  const __m256i zero = _mm256_setzero_si256();
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < nch; ++c) {
      const __m256i code = codes_fixed<W0, W1>(rows[r], o0, o1, c);
      const size_t at = (static_cast<size_t>(r) * nch + c) * 2;
      __m256i x = _mm256_shuffle_epi8(t0, code);
      __m256i y = WIDE ? _mm256_shuffle_epi8(t1, code) : zero;
      _mm256_store_si256(reinterpret_cast<__m256i*>(words) + at, _mm256_unpacklo_epi8(x, y));
      _mm256_store_si256(reinterpret_cast<__m256i*>(words) + at + 1, _mm256_unpackhi_epi8(x, y));
      if constexpr (TWO) {
        x = _mm256_shuffle_epi8(t1, code);
        _mm256_store_si256(reinterpret_cast<__m256i*>(words2) + at, _mm256_unpacklo_epi8(x, zero));
        _mm256_store_si256(reinterpret_cast<__m256i*>(words2) + at + 1, _mm256_unpackhi_epi8(x, zero));
      }
    }
}

TKV_AVX2_INT8 inline __m256i table16(const uint8_t* t) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}

// Centroid bytes (the table's, c8 + 128) of nr rows into stage rows of sdp
// bytes (sdp >= dp, a multiple of 32), and with t2 a second table's into
// stage2; bytes past dp and coordinates no part covers hold 128 (centroid 0).
TKV_AVX2_INT8 void stage_rows(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int nr, int sdp,
                              uint8_t* stage, const Int8Keys* k2, uint8_t* stage2) {
  alignas(32) uint8_t codes[1024 + 32];
  for (int r = 0; r < nr; ++r) {
    uint8_t* out = stage + static_cast<size_t>(r) * sdp;
    uint8_t* out2 = k2 ? stage2 + static_cast<size_t>(r) * sdp : nullptr;
    std::memset(out, 128, static_cast<size_t>(sdp));
    if (out2) std::memset(out2, 128, static_cast<size_t>(sdp));
    row_codes(L, rows[r], codes);
    for (int p = 0; p < L.nparts; ++p) {
      const RowLayout::Part& part = L.parts[p];
      const int e = std::min(part.begin + part.count, k.dp);
      lookup(k.table[p], part.bits, codes, part.begin, e, out);
      if (out2) lookup(k2->table[p], part.bits, codes, part.begin, e, out2);
    }
  }
}

// A 32-coordinate chunk of words splits by in-lane unpacking into A (the
// chunk's coordinates 0-7 and 16-23) and B (8-15 and 24-31); the queries'
// words are laid out the same way once per call: qw[j][c][0..15] = A,
// [16..31] = B, zero past dp.
TKV_AVX2_INT8 inline void store_ab(__m256i lo16, __m256i hi16, int16_t* o) {  // words 0-15, 16-31 -> A, B
  _mm256_store_si256(reinterpret_cast<__m256i*>(o), _mm256_permute2x128_si256(lo16, hi16, 0x20));
  _mm256_store_si256(reinterpret_cast<__m256i*>(o + 16), _mm256_permute2x128_si256(lo16, hi16, 0x31));
}
// One template for the byte (tq2/tq3) and the word (tq4) queries: they
// differ only in how a chunk of 32 becomes two vectors of 16 words.
template <typename T>
TKV_AVX2_INT8 void query_words(const T* q, int G, int dp, int16_t* qw) {
  static_assert(std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t>, "byte or word queries");
  const int nch = chunks32(dp);
  alignas(32) T tail[32];
  for (int j = 0; j < G; ++j)
    for (int c = 0; c < nch; ++c) {
      const T* src = q + static_cast<size_t>(j) * dp + 32 * c;
      if (32 * c + 32 > dp) {  // dp is a multiple of 16: the last chunk's second half is zero
        std::memset(tail, 0, sizeof(tail));
        std::memcpy(tail, src, sizeof(T) * static_cast<size_t>(dp - 32 * c));
        src = tail;
      }
      int16_t* o = qw + (static_cast<size_t>(j) * nch + c) * 32;
      if constexpr (std::is_same_v<T, int8_t>) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
        store_ab(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(x)), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(x, 1)), o);
      } else {
        store_ab(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)),
                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16)), o);
      }
    }
}

// int8_weights (the specification) on 8 lanes: the same bytes.
TKV_AVX2_INT8 float weights8(const float* w, int n, uint8_t* w8) {
  __m256 m = _mm256_setzero_ps();
  int r = 0;
  for (; r + 8 <= n; r += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(w + r));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  float mx = _mm_cvtss_f32(m4);
  for (; r < n; ++r) mx = std::max(mx, w[r]);
  if (!(mx > 0.0f)) {
    std::memset(w8, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float inv = 255.0f / mx;
  if (!(inv <= std::numeric_limits<float>::max())) {  // (int8_weights: bytes 0)
    std::memset(w8, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const __m256 vinv = _mm256_set1_ps(inv), half = _mm256_set1_ps(0.5f);
  const __m256i top = _mm256_set1_epi32(255);
  r = 0;
  for (; r + 8 <= n; r += 8) {
    const __m256i v = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_fmadd_ps(_mm256_loadu_ps(w + r), vinv, half)), top);
    const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(w8 + r), _mm_packus_epi16(p, p));
  }
  for (; r < n; ++r) w8[r] = static_cast<uint8_t>(std::min(255, static_cast<int>(std::fma(w[r], inv, 0.5f))));
  return mx / 255.0f;
}

// The sums of 8 accumulators (2 rows x 4 queries) into dots, plus add[j]
// (when given) for query j0 + j.
TKV_AVX2_INT8 inline void store8(const __m256i (&acc)[2][4], int r, int nr2, int j0, int nj, int32_t* dots, int ld,
                                 const int32_t* add = nullptr) {
  for (int i = 0; i < nr2; ++i) {
    const __m256i h01 = _mm256_hadd_epi32(acc[i][0], acc[i][1]), h23 = _mm256_hadd_epi32(acc[i][2], acc[i][3]);
    const __m256i h = _mm256_hadd_epi32(h01, h23);  // per lane: the 4 queries' halves
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    if (add) s = _mm_add_epi32(s, _mm_loadu_si128(reinterpret_cast<const __m128i*>(add)));
    alignas(16) int32_t v[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(v), s);
    for (int jj = 0; jj < nj; ++jj) dots[static_cast<size_t>(j0 + jj) * ld + r + i] = v[jj];
  }
}

// dots[j][r] = Σ words[r] · qw[j] for nr rows and G queries: words [nr][nch]
// chunks of A then B words, staged once per block so that the loop keeps 8
// accumulators and 4 row vectors in the 16 registers (converting bytes to
// words inside it spilled: 15% of the kernel).
// NJ of a group's queries (as dot_bytes_nj).
template <int NJ>
TKV_AVX2_INT8 void dot_words_nj(int nr, size_t stride, const __m256i* const* q, int j0, int32_t* dots, int ld, int r0,
                                const int16_t* words) {
  for (int r = 0; r < nr; r += 2) {
    const int r1 = std::min(r + 1, nr - 1), nr2 = std::min(2, nr - r);
    const __m256i* x0 = reinterpret_cast<const __m256i*>(words + r * stride);
    const __m256i* x1 = reinterpret_cast<const __m256i*>(words + r1 * stride);
    __m256i acc[2][4];
    for (auto& a : acc)
      for (auto& x : a) x = _mm256_setzero_si256();
    for (size_t c = 0; c < stride / 16; c += 2) {
      const __m256i a0 = _mm256_load_si256(x0 + c), b0 = _mm256_load_si256(x0 + c + 1);
      const __m256i a1 = _mm256_load_si256(x1 + c), b1 = _mm256_load_si256(x1 + c + 1);
#pragma GCC unroll 4
      for (int jj = 0; jj < NJ; ++jj) {
        const __m256i qa = _mm256_load_si256(q[jj] + c), qb = _mm256_load_si256(q[jj] + c + 1);
        acc[0][jj] = _mm256_add_epi32(acc[0][jj], _mm256_add_epi32(_mm256_madd_epi16(a0, qa), _mm256_madd_epi16(b0, qb)));
        acc[1][jj] = _mm256_add_epi32(acc[1][jj], _mm256_add_epi32(_mm256_madd_epi16(a1, qa), _mm256_madd_epi16(b1, qb)));
      }
    }
    store8(acc, r0 + r, nr2, j0, NJ, dots, ld);
  }
}
TKV_AVX2_INT8 void dot_words(int nr, int nch, const int16_t* qw, int G, int32_t* dots, int ld, int r0,
                             const int16_t* words) {
  const size_t stride = static_cast<size_t>(nch) * 32;
  for (int j0 = 0; j0 < G; j0 += 4) {
    const int nj = std::min(4, G - j0);
    const __m256i* q[4];
    for (int jj = 0; jj < nj; ++jj) q[jj] = reinterpret_cast<const __m256i*>(qw + static_cast<size_t>(j0 + jj) * stride);
    with_count(nj, [&](auto c) TKV_AVX2_INT8 { dot_words_nj<c>(nr, stride, q, j0, dots, ld, r0, words); });
  }
}

// The narrow keys (Int8Keys::narrow): dots[j][r] = Σ_p u[r][p] · q8[j][p] +
// add[j] for nr rows of bytes u = c8 + 32 (in [1, 63]; stage: [nr][dp], the
// ordered decode's positions) and G queries in that order; add[j] = 96 Σ q8[j]
// makes them the specification's Σ (c8 + 128) · q8. Per 64 positions and
// query: two vpmaddubsw (pairs within ±2·63·127), their sum on 16 bits
// (within ±32004), one vpmaddwd by ones and one add, where the words take
// four vpmaddwd and four adds.
// NJ of a group's queries (with_count).
template <int NJ>
TKV_AVX2_INT8 void dot_bytes_nj(int nr, int dp, const int8_t* const* q, int j0, const int32_t* add, int32_t* dots,
                                int ld, int r0, const uint8_t* stage) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < nr; ++r) {
    const uint8_t* x = stage + static_cast<size_t>(r) * dp;
    __m256i acc[2][4];
    for (auto& a : acc[0]) a = _mm256_setzero_si256();
    for (int c = 0; c < dp; c += 64) {
      const __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + c));
      const __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + c + 32));
#pragma GCC unroll 4
      for (int jj = 0; jj < NJ; ++jj) {
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[jj] + c));
        const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[jj] + c + 32));
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(a, qa), _mm256_maddubs_epi16(b, qb));
        acc[0][jj] = _mm256_add_epi32(acc[0][jj], _mm256_madd_epi16(s, ones));
      }
    }
    store8(acc, r0 + r, 1, j0, NJ, dots, ld, add + j0);  // (store8 reads acc[0][NJ..3]: left zero)
  }
}
TKV_AVX2_INT8 void dot_bytes(int nr, int dp, const int8_t* q8, int G, const int32_t* add, int32_t* dots, int ld,
                             int r0, const uint8_t* stage) {
  // One row at a time: 4 accumulators, the row's two vectors and the query
  // bytes as memory operands stay within the 16 registers (two rows at a
  // time spilled accumulators: perf, RESULTS §39).
  for (int j0 = 0; j0 < G; j0 += 4) {
    const int nj = std::min(4, G - j0);
    const int8_t* q[4];
    for (int jj = 0; jj < nj; ++jj) q[jj] = q8 + static_cast<size_t>(j0 + jj) * dp;
    with_count(nj, [&](auto c) TKV_AVX2_INT8 { dot_bytes_nj<c>(nr, dp, q, j0, add, dots, ld, r0, stage); });
  }
}

// Bytes (unsigned, c8 + 128) of nr stage rows as A and B words.
TKV_AVX2_INT8 void bytes_to_words(const uint8_t* stage, int nr, int nch, int16_t* words) {
  const __m256i zero = _mm256_setzero_si256();
  for (int i = 0; i < nr * nch; ++i) {
    const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(stage) + i);
    _mm256_store_si256(reinterpret_cast<__m256i*>(words) + 2 * i, _mm256_unpacklo_epi8(x, zero));
    _mm256_store_si256(reinterpret_cast<__m256i*>(words) + 2 * i + 1, _mm256_unpackhi_epi8(x, zero));
  }
}

// Thread-local scratch: stages and query words (up to 1024 coordinates, 16
// queries a table: attention passes G <= 2 x the GQA group).
struct Scratch {
  alignas(32) uint8_t stage[kMaxRows * 1024];
  alignas(32) uint8_t stage2[kMaxRows * 1024];
  alignas(32) int16_t qw[64 * 1024];
  alignas(32) int16_t words[kMaxRows * 1024];
  alignas(32) int16_t words2[kMaxRows * 1024];
  alignas(32) int16_t pairs[kMaxRows / 2 * 1024 * 2];
};
// On the heap, made on a thread's first call: a thread_local object of this
// size sits in every thread's static TLS block, which glibc zeroes when it
// starts each thread (the server's HTTP threads grew its RSS by 26 MiB).
Scratch& scratch() {
  static thread_local std::unique_ptr<Scratch> s;
  if (!s) s = std::make_unique<Scratch>();
  return *s;
}

}  // namespace

TKV_AVX2_INT8 void int8_dots2_avx2(const Int8Keys& k, const Int8Keys* k2, const RowLayout& L,
                                   const uint8_t* const* rows, int n, const int8_t* q8, int G, int32_t* dots, int G2,
                                   int32_t* dots2, int ld, bool ordered) {
  if (G > 64 || k.dp > 1024) {  // past the scratch: the specification itself
    int8_dots_ref(k, L, rows, n, q8, G, dots, ld);
    if (k2) int8_dots_ref(*k2, L, rows, n, q8, G2, dots2, ld);
    return;
  }
  Scratch& s = scratch();
  const int dp = k.dp, nch = chunks32(dp), sdp = nch * 32;
  const int sig = sdp == dp ? fixed_sig(k, L) : 0;
  ordered = ordered && !k2 && k.avx2_sig != 0;  // (the caller's promise: queries in int8_query_order)
  alignas(16) int32_t add96[64 + 4] = {};
  if (ordered && k.narrow) {  // 96 Σ q8 (dp a multiple of 64): the bytes plus 128 summed by vpsadbw
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), zero = _mm256_setzero_si256();
    for (int j = 0; j < G; ++j) {
      __m256i t = zero;
      for (int i = 0; i < dp; i += 32)
        t = _mm256_add_epi64(t, _mm256_sad_epu8(_mm256_xor_si256(
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + static_cast<size_t>(j) * dp + i)), flip), zero));
      const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      add96[j] = 96 * (static_cast<int32_t>(_mm_cvtsi128_si32(h) + _mm_extract_epi32(h, 2)) - 128 * dp);
    }
  } else {
    query_words(q8, G, dp, s.qw);
  }
  for (int r0 = 0; r0 < n; r0 += kMaxRows) {
    const int nr = std::min(kMaxRows, n - r0);
    if (ordered && k.narrow) {
      with_ordered(k.avx2_sig, [&](auto sg) TKV_AVX2_INT8 { bytes_ordered<sg>(k, L, rows + r0, nr, s.stage); });
      dot_bytes(nr, dp, q8, G, add96, dots, ld, r0, s.stage);
      continue;
    }
    if (ordered) {
      with_ordered(k.avx2_sig, [&](auto sg) TKV_AVX2_INT8 { words_ordered<sg>(k, L, rows + r0, nr, s.words); });
      dot_words(nr, nch, s.qw, G, dots, ld, r0, s.words);
      continue;
    }
    const bool fixed = with_fixed(sig, [&](auto w0, auto w1) TKV_AVX2_INT8 {
      if (k2) {
        words_fixed<w0, w1, false, true>(k, L, rows + r0, nr, table16(k.table[0]), table16(k2->table[0]), s.words, s.words2);
      } else {
        words_fixed<w0, w1, false, false>(k, L, rows + r0, nr, table16(k.table[0]), table16(k.table[0]), s.words, nullptr);
      }
    });
    if (!fixed) {
      stage_rows(k, L, rows + r0, nr, sdp, s.stage, k2, k2 ? s.stage2 : nullptr);
      bytes_to_words(s.stage, nr, nch, s.words);
      if (k2) bytes_to_words(s.stage2, nr, nch, s.words2);
    }
    dot_words(nr, nch, s.qw, G, dots, ld, r0, s.words);
    if (k2) dot_words(nr, nch, s.qw, G2, dots2, ld, r0, s.words2);
  }
}

TKV_AVX2_INT8 void int8_dots16_avx2(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                    const int16_t* q16, int G, int32_t* dots, int ld) {
  Scratch& s = scratch();
  const int dp = k.dp, nch = chunks32(dp), sdp = nch * 32;
  // A wide layout is one 4-bit part over dp 64, 128 or 256 (int8_keys_prepare):
  // always a fixed one; anything else is the specification's to answer.
  const int sig = sdp == dp ? fixed_sig(k, L) : 0;
  if (G > 64 || dp > 1024 || !k.wide || sig != 40) return int8_dots16_ref(k, L, rows, n, q16, G, dots, ld);
  query_words(q16, G, dp, s.qw);
  // The 16-bit table as its low and high bytes (vpshufb looks up bytes).
  alignas(16) uint8_t lo[16], hi[16];
  for (int j = 0; j < 16; ++j) {
    const uint16_t w = static_cast<uint16_t>(k.table16[j]);
    lo[j] = static_cast<uint8_t>(w & 255);
    hi[j] = static_cast<uint8_t>(w >> 8);
  }
  const __m256i tlo = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(lo)));
  const __m256i thi = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(hi)));
  for (int r0 = 0; r0 < n; r0 += kMaxRows) {
    const int nr = std::min(kMaxRows, n - r0);
    words_fixed<4, 0, true, false>(k, L, rows + r0, nr, tlo, thi, s.words, nullptr);
    dot_words(nr, nch, s.qw, G, dots, ld, r0, s.words);
  }
}

// Two rows' signed centroid bytes of one 32-coordinate chunk as the four
// vectors of row pairs: dword lane i of out[v] holds the two rows' words of
// coordinate 8v + i (interleaved bytes, then sign-extended: a byte pair
// becomes a word pair in place), natural order.
TKV_AVX2_INT8 inline void pair_words(__m256i a, __m256i b, __m256i* out) {
  const __m256i lo = _mm256_unpacklo_epi8(a, b), hi = _mm256_unpackhi_epi8(a, b);  // lanes: 0-7 | 16-23, 8-15 | 24-31
  _mm256_store_si256(out, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(lo)));
  _mm256_store_si256(out + 1, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(hi)));
  _mm256_store_si256(out + 2, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(lo, 1)));
  _mm256_store_si256(out + 3, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(hi, 1)));
}

// Row pairs of a fixed layout straight from the codes: the signed table
// (c8, no +128) looked up, no stage of bytes.
template <int W0, int W1>
TKV_AVX2_INT8 void pairs_fixed(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int nr, __m256i* pairs) {
  const RowLayout::Part& p = L.parts[0];
  const size_t o0 = p.planes[0].offset, o1 = W1 ? p.planes[1].offset : 0;
  const int nch = k.dp / 32;
  const __m256i tab = _mm256_xor_si256(
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k.table[0]))),
      _mm256_set1_epi8(static_cast<char>(0x80)));
  for (int m = 0; 2 * m < nr; ++m) {
    const uint8_t* ra = rows[2 * m];
    const uint8_t* rb = rows[std::min(2 * m + 1, nr - 1)];  // (an odd block's last pair: weight 0)
    for (int c = 0; c < nch; ++c)
      pair_words(_mm256_shuffle_epi8(tab, codes_fixed<W0, W1>(ra, o0, o1, c)),
                 _mm256_shuffle_epi8(tab, codes_fixed<W0, W1>(rb, o0, o1, c)),
                 pairs + (static_cast<size_t>(m) * nch + c) * 4);
  }
}

// pairs_fixed in the order (the signed table).
template <int SIG>
TKV_AVX2_INT8 void pairs_ordered(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int nr,
                                 __m256i* pairs) {
  const Ordered<SIG> bytes(L, k.avx2_vtable);
  const int nch = k.dp / 32;
  for (int m = 0; 2 * m < nr; ++m) {
    const uint8_t* ra = rows[2 * m];
    const uint8_t* rb = rows[std::min(2 * m + 1, nr - 1)];  // (an odd block's last pair: weight 0)
    for (int c = 0; c < nch / 2; ++c) {
      __m256i la, ha, lb, hb;
      bytes(ra, c, la, ha);
      bytes(rb, c, lb, hb);
      pair_words(la, lb, pairs + (static_cast<size_t>(m) * nch + 2 * c) * 4);
      pair_words(ha, hb, pairs + (static_cast<size_t>(m) * nch + 2 * c + 1) * 4);
    }
  }
}

// Four rows' signed centroid bytes of 32 positions (x[0..3], the ordered
// decode's) as four vectors of quads: dword i of a vector holds the four
// rows' bytes of one position; out[0] positions 0-3 | 16-19 (the two 128-bit
// lanes), out[1] 4-7 | 20-23, out[2] 8-11 | 24-27, out[3] 12-15 | 28-31.
TKV_AVX2_INT8 inline void quad_bytes(const __m256i (&x)[4], __m256i* out) {
  const __m256i ab_lo = _mm256_unpacklo_epi8(x[0], x[1]), ab_hi = _mm256_unpackhi_epi8(x[0], x[1]);
  const __m256i cd_lo = _mm256_unpacklo_epi8(x[2], x[3]), cd_hi = _mm256_unpackhi_epi8(x[2], x[3]);
  _mm256_store_si256(out, _mm256_unpacklo_epi16(ab_lo, cd_lo));
  _mm256_store_si256(out + 1, _mm256_unpackhi_epi16(ab_lo, cd_lo));
  _mm256_store_si256(out + 2, _mm256_unpacklo_epi16(ab_hi, cd_hi));
  _mm256_store_si256(out + 3, _mm256_unpackhi_epi16(ab_hi, cd_hi));
}

// The values on bytes (Int8Keys::bound <= kNarrowV) in the order: per quad
// of rows and 64 positions eight vectors of quads (quad_bytes); per query
// the quad's four weight bytes broadcast, vpmaddubsw (each 16-bit sum two
// rows' products, within ±2·255·63), NQ quads summed on 16 bits (NQ = 2
// where |c8| <= kNarrow: within ±4·255·31 = ±31620), one vpmaddwd by ones
// to 32 bits and one add. Per 16 positions, 8 rows and a query: NQ = 2
// takes 4 vpmaddubsw, 2 16-bit adds, 2 vpmaddwd and 2 adds where the row
// pairs summed on 16 bits (tq2, tq3 until RESULTS §41) took 4 vpmaddubsw, 2
// 16-bit adds, 6 shifts and 4 adds; NQ = 1 takes 4 vpmaddubsw, 4 vpmaddwd
// and 4 adds where the words (tq4 until §41) took 8 vpmaddwd and 8 adds.
// Accumulators go back in position order once per block (two lane permutes
// per 16 positions and query).
template <int SIG, int NQ>
TKV_AVX2_INT8 void values_quads(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                const float* w, int G, int ldw, float* acc, __m256i* bq) {
  static_assert(NQ == 1 || NQ == 2);
  const Ordered<SIG> bytes(L, k.avx2_vtable);
  const int dp = k.dp, n64 = dp / 64;
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) uint8_t w8[kMaxRows + 8];
  for (int r0 = 0; r0 < n; r0 += kMaxRows) {
    const int nr = std::min(kMaxRows, n - r0);
    const int nq = ((nr + 3) / 4 + NQ - 1) / NQ * NQ;  // quads, a multiple of NQ
    const uint8_t* const* rr = rows + r0;
    for (int m = 0; m < nq; ++m) {  // past the rows: the last row again (weight 0)
      const uint8_t* r4[4];
      for (int t = 0; t < 4; ++t) r4[t] = rr[std::min(4 * m + t, nr - 1)];
      for (int c = 0; c < n64; ++c) {
        __m256i lo[4], hi[4];
        for (int t = 0; t < 4; ++t) bytes(r4[t], c, lo[t], hi[t]);
        __m256i* o = bq + (static_cast<size_t>(m) * n64 + c) * 8;
        quad_bytes(lo, o);
        quad_bytes(hi, o + 4);
      }
    }
    const size_t qstride = static_cast<size_t>(n64) * 8;  // vectors a quad
    for (int j0 = 0; j0 < G; j0 += 4) {
      const int nj = std::min(4, G - j0);
      float f[4] = {0, 0, 0, 0};
      alignas(32) int32_t wq[kMaxRows / 4][4];  // a quad's four weight bytes
      bool any = false;
      for (int jj = 0; jj < 4; ++jj) {
        if (jj < nj) {
          f[jj] = weights8(w + static_cast<size_t>(j0 + jj) * ldw + r0, nr, w8) * k.cs;
          std::memset(w8 + nr, 0, sizeof(w8) - static_cast<size_t>(nr));
        }
        for (int m = 0; m < nq; ++m) {
          uint32_t b = 0;
          if (jj < nj && f[jj] != 0.0f) std::memcpy(&b, w8 + 4 * m, 4);
          wq[m][jj] = static_cast<int32_t>(b);
        }
        any |= f[jj] != 0.0f;
      }
      if (!any) continue;
      // The products for the group's NJ queries (with_count).
      auto products = [&](auto njc) TKV_AVX2_INT8 {
      constexpr int NJ = decltype(njc)::value;
      for (int e = 0; e < 8 * n64; e += 2) {  // vectors e, e + 1 of each quad: 16 positions
        __m256i A[4][2];
        for (auto& x : A) x[0] = x[1] = _mm256_setzero_si256();
        for (int m = 0; m < nq; m += NQ) {
          const __m256i* pm = bq + m * qstride + e;
          const __m256i p0 = _mm256_load_si256(pm), p1 = _mm256_load_si256(pm + 1);
          __m256i p2 = p0, p3 = p1;
          if constexpr (NQ == 2) p2 = _mm256_load_si256(pm + qstride), p3 = _mm256_load_si256(pm + qstride + 1);
#pragma GCC unroll 4
          for (int jj = 0; jj < NJ; ++jj) {
            const __m256i w0 = _mm256_set1_epi32(wq[m][jj]);
            __m256i x0 = _mm256_maddubs_epi16(w0, p0), x1 = _mm256_maddubs_epi16(w0, p1);
            if constexpr (NQ == 2) {
              const __m256i w1 = _mm256_set1_epi32(wq[m + 1][jj]);
              x0 = _mm256_add_epi16(x0, _mm256_maddubs_epi16(w1, p2));
              x1 = _mm256_add_epi16(x1, _mm256_maddubs_epi16(w1, p3));
            }
            A[jj][0] = _mm256_add_epi32(A[jj][0], _mm256_madd_epi16(x0, ones));
            A[jj][1] = _mm256_add_epi32(A[jj][1], _mm256_madd_epi16(x1, ones));
          }
        }
        // A[.][0]: positions 4q .. 4q+3 | 16+4q .., A[.][1]: 4q+4 .. | 20+4q .. (q = e % 4,
        // 0 or 2) of the 32 at 64 (e / 8) + 32 (e % 8 / 4).
        const int base = 64 * (e / 8) + 32 * (e % 8 / 4) + 4 * (e % 4);
        for (int jj = 0; jj < nj; ++jj) {
          if (f[jj] == 0.0f) continue;
          const __m256 fv = _mm256_set1_ps(f[jj]);
          float* out = acc + static_cast<size_t>(j0 + jj) * dp + base;
          const __m256i first = _mm256_permute2x128_si256(A[jj][0], A[jj][1], 0x20);
          const __m256i second = _mm256_permute2x128_si256(A[jj][0], A[jj][1], 0x31);
          _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), _mm256_mul_ps(_mm256_cvtepi32_ps(first), fv)));
          _mm256_storeu_ps(out + 16, _mm256_add_ps(_mm256_loadu_ps(out + 16), _mm256_mul_ps(_mm256_cvtepi32_ps(second), fv)));
        }
      }
      };
      with_count(nj, products);
    }
  }
}

TKV_AVX2_INT8 void int8_values_avx2(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                    const float* w, int G, int ldw, float* acc, bool ordered) {
  Scratch& s = scratch();
  const int dp = k.dp, nch = chunks32(dp), sdp = nch * 32, n8 = dp / 8;
  if (dp > 1024 || dp % 16 != 0) return int8_values_ref(k, L, rows, n, w, G, ldw, acc);
  if (ordered && k.avx2_sig && k.bound <= Int8Keys::kNarrowV)
    return with_ordered(k.avx2_sig, [&](auto sg) TKV_AVX2_INT8 {
      __m256i* bq = reinterpret_cast<__m256i*>(s.pairs);
      // (Four rows or fewer, as a peaked softmax leaves after ValuesInt8's
      // drop: one quad, not two of which one is padding.)
      if (k.bound <= Int8Keys::kNarrow && n > 4) values_quads<sg, 2>(k, L, rows, n, w, G, ldw, acc, bq);
      else values_quads<sg, 1>(k, L, rows, n, w, G, ldw, acc, bq);
    });
  alignas(32) uint8_t w8[kMaxRows];
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i* pairs = reinterpret_cast<__m256i*>(s.pairs);
  const int sig = sdp == dp ? fixed_sig(k, L) : 0;
  for (int r0 = 0; r0 < n; r0 += kMaxRows) {
    const int nr = std::min(kMaxRows, n - r0), np = (nr + 1) / 2;
    // Row pairs as words, [np][nch][4] vectors (pair_words).
    if (ordered && k.avx2_sig) {
      with_ordered(k.avx2_sig, [&](auto sg) TKV_AVX2_INT8 { pairs_ordered<sg>(k, L, rows + r0, nr, pairs); });
    } else if (!with_fixed(sig, [&](auto w0, auto w1) TKV_AVX2_INT8 { pairs_fixed<w0, w1>(k, L, rows + r0, nr, pairs); })) {
      stage_rows(k, L, rows + r0, nr, sdp, s.stage, nullptr, nullptr);
      if (nr % 2) std::memset(s.stage + static_cast<size_t>(nr) * sdp, 128, static_cast<size_t>(sdp));
      for (int m = 0; m < np; ++m) {
        const __m256i* ra = reinterpret_cast<const __m256i*>(s.stage + static_cast<size_t>(2 * m) * sdp);
        const __m256i* rb = reinterpret_cast<const __m256i*>(s.stage + static_cast<size_t>(2 * m + 1) * sdp);
        for (int c = 0; c < nch; ++c)
          pair_words(_mm256_xor_si256(_mm256_load_si256(ra + c), flip), _mm256_xor_si256(_mm256_load_si256(rb + c), flip),
                     pairs + (static_cast<size_t>(m) * nch + c) * 4);
      }
    }
    for (int j0 = 0; j0 < G; j0 += 4) {
      const int nj = std::min(4, G - j0);
      float f[4] = {0, 0, 0, 0};
      alignas(32) int32_t wp[4][kMaxRows / 2];
      bool any = false;
      for (int jj = 0; jj < 4; ++jj) {
        if (jj < nj) {
          f[jj] = weights8(w + static_cast<size_t>(j0 + jj) * ldw + r0, nr, w8) * k.cs;
          if (nr % 2) w8[nr] = 0;
        }
        for (int m = 0; m < np; ++m)
          wp[jj][m] = jj < nj && f[jj] != 0.0f ? int32_t{w8[2 * m]} | int32_t{w8[2 * m + 1]} << 16 : 0;
        any |= f[jj] != 0.0f;
      }
      if (!any) continue;
      for (int v = 0; v < n8; v += 2) {  // 16 coordinates: vectors v and v + 1 of their chunk
        __m256i a[4][2];
        for (auto& x : a) x[0] = x[1] = _mm256_setzero_si256();
        for (int m = 0; m < np; ++m) {
          const __m256i* pm = pairs + static_cast<size_t>(m) * nch * 4 + v;  // (4 vectors a chunk: vector v is coordinates 8v..)
          const __m256i p0 = _mm256_load_si256(pm), p1 = _mm256_load_si256(pm + 1);
          for (int jj = 0; jj < 4; ++jj) {
            const __m256i wv = _mm256_set1_epi32(wp[jj][m]);
            a[jj][0] = _mm256_add_epi32(a[jj][0], _mm256_madd_epi16(p0, wv));
            a[jj][1] = _mm256_add_epi32(a[jj][1], _mm256_madd_epi16(p1, wv));
          }
        }
        for (int jj = 0; jj < nj; ++jj) {
          if (f[jj] == 0.0f) continue;
          const __m256 fv = _mm256_set1_ps(f[jj]);
          for (int h = 0; h < 2; ++h) {
            float* out = acc + static_cast<size_t>(j0 + jj) * dp + 8 * (v + h);
            _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), _mm256_mul_ps(_mm256_cvtepi32_ps(a[jj][h]), fv)));
          }
        }
      }
    }
  }
}

// The pair tables (score_int8.h, Int8Keys::lut). Per block of 32 rows the
// plane bytes (dp/4 a row) are transposed so that one vector holds byte b of
// all 32 rows; its low and high nibbles index the tables of pairs 2b and
// 2b+1 (one vpshufb each, 32 rows at once), summed as in Faiss's fast-scan:
// each 32-byte lookup added as 16 words to A (row 2w's byte plus 256 times
// row 2w+1's, wrapping) and shifted right by 8 to B (row 2w+1's), so row 2w
// = A − 256 B mod 2^16, exact while dp/2 lookups of at most 255 stay below
// 2^16 (kLutMaxDp). Per row and query: dp/4 · (2 lookups, 5 adds and
// shifts) / 32 operations, against dp/64 · 5 for the byte kernel after its
// staging (RESULTS §42: 2.3x on K alone, tq2 d 128, Zen 1).

// 16-byte chunk m of 32 rows' plane bytes (rows r and r + 16 in the two
// lanes) transposed into T[m + c][0..31] = byte m + c of rows 0..31: unpacks
// of bytes (pairs of rows), words (row pairs 0-2, 1-3), dwords (quads 0-4) in
// two groups of 8 rows, then quadwords across the groups; c_j then holds
// columns col[j] (low quadword) and col[j] + 1 (high), rows in order.
// Unrolled: 16 vectors live (looped, GCC kept them in memory: 9 against 2.4
// ns a row, d 128).
TKV_AVX2_INT8 inline void transpose16x32(const uint8_t* const* rows, size_t off, uint8_t* T) {
  __m256i c[2][8];
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {
    __m256i x[8], a[8], b[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r)
      x[r] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(rows[8 * g + r + 16] + off),
                                 reinterpret_cast<const __m128i*>(rows[8 * g + r] + off));
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      a[2 * i] = _mm256_unpacklo_epi8(x[2 * i], x[2 * i + 1]);
      a[2 * i + 1] = _mm256_unpackhi_epi8(x[2 * i], x[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const int j = (i & 1) + 4 * (i >> 1);  // 0, 1, 4, 5
      b[j] = _mm256_unpacklo_epi16(a[j], a[j + 2]);
      b[j + 2] = _mm256_unpackhi_epi16(a[j], a[j + 2]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      c[g][j] = _mm256_unpacklo_epi32(b[j], b[j + 4]);
      c[g][j + 4] = _mm256_unpackhi_epi32(b[j], b[j + 4]);
    }
  }
  static constexpr int col[8] = {0, 8, 4, 12, 2, 10, 6, 14};
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(T + 32 * col[j]), _mm256_unpacklo_epi64(c[0][j], c[1][j]));
    _mm256_store_si256(reinterpret_cast<__m256i*>(T + 32 * (col[j] + 1)), _mm256_unpackhi_epi64(c[0][j], c[1][j]));
  }
}

// NJ queries' sums over one transposed block (nb = dp/4 bytes a row) into
// out[j][0..31], rows in order.
template <int NJ>
TKV_AVX2_INT8 void lut_block(const uint8_t* T, int nb, const uint8_t* const* tab, int32_t* const* out) {
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256i A[NJ], B[NJ];
  for (int j = 0; j < NJ; ++j) A[j] = B[j] = _mm256_setzero_si256();
  for (int b = 0; b < nb; ++b) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(T + 32 * b));
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j) {
      const __m256i* t = reinterpret_cast<const __m256i*>(tab[j] + 64 * static_cast<size_t>(b));
      const __m256i x0 = _mm256_shuffle_epi8(_mm256_loadu_si256(t), lo);  // (the caller's tables: any alignment)
      const __m256i x1 = _mm256_shuffle_epi8(_mm256_loadu_si256(t + 1), hi);
      A[j] = _mm256_add_epi16(A[j], _mm256_add_epi16(x0, x1));
      B[j] = _mm256_add_epi16(B[j], _mm256_add_epi16(_mm256_srli_epi16(x0, 8), _mm256_srli_epi16(x1, 8)));
    }
  }
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
#pragma GCC unroll 4
  for (int j = 0; j < NJ; ++j) {
    // Word w of lane l: row 16l + 2w in `even`, 16l + 2w + 1 in B; dword m
    // of a lane holds rows 4m, 4m + 2 (even's low and high words) and 4m +
    // 1, 4m + 3 (B's), put in order by unpacks.
    const __m256i even = _mm256_sub_epi16(A[j], _mm256_slli_epi16(B[j], 8));
    const __m256i t0 = _mm256_and_si256(even, lo16), t1 = _mm256_and_si256(B[j], lo16);
    const __m256i t2 = _mm256_srli_epi32(even, 16), t3 = _mm256_srli_epi32(B[j], 16);
    const __m256i a = _mm256_unpacklo_epi32(t0, t1), b = _mm256_unpackhi_epi32(t0, t1);
    const __m256i c = _mm256_unpacklo_epi32(t2, t3), d = _mm256_unpackhi_epi32(t2, t3);
    const __m256i r0 = _mm256_unpacklo_epi64(a, c), r1 = _mm256_unpackhi_epi64(a, c);  // rows 0-3 | 16-19, 4-7 | 20-23
    const __m256i r2 = _mm256_unpacklo_epi64(b, d), r3 = _mm256_unpackhi_epi64(b, d);  // 8-11 | 24-27, 12-15 | 28-31
    __m256i* o = reinterpret_cast<__m256i*>(out[j]);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(r2, r3, 0x31));
  }
}

// int8_lut_build_ref on 8 entries a vector: the same products, fma,
// rounding (nearest, ties to even), clamp and NaN -> 0, so the same bytes.
// (The scalar build called libm's fma and nearbyint per entry: ~10 us a
// query at d 128, a share of a short context's whole step.)
TKV_AVX2_INT8 float int8_lut_build_avx2(const Int8Keys& k, const float* q, uint8_t* lut, int32_t* bias) {
  const int np = k.dp / 2;
  *bias = 128 * np;
  float inv;
  const float sL = int8_lut_scale(k, q, &inv);
  const float* c = k.lut_c;
  const __m256 ca = _mm256_setr_ps(c[0], c[1], c[2], c[3], c[0], c[1], c[2], c[3]);  // c[x & 3]
  const __m256 cb0 = _mm256_setr_ps(c[0], c[0], c[0], c[0], c[1], c[1], c[1], c[1]);  // c[x >> 2], x < 8
  const __m256 cb1 = _mm256_setr_ps(c[2], c[2], c[2], c[2], c[3], c[3], c[3], c[3]);  // x >= 8
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i b128 = _mm256_set1_epi32(128);
  auto entries = [&](__m256 e) TKV_AVX2_INT8 {
    __m256 v = _mm256_round_ps(_mm256_mul_ps(e, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i x = _mm256_add_epi32(_mm256_cvtps_epi32(v), b128);
    return _mm_packs_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));  // 8 words
  };
  for (int P = 0; P < np; ++P) {
    const __m256 qa = _mm256_set1_ps(q[2 * P]), qb = _mm256_set1_ps(q[2 * P + 1]);
    const __m256 pa = _mm256_mul_ps(qa, ca);
    const __m128i b = _mm_packus_epi16(entries(_mm256_fmadd_ps(qb, cb0, pa)), entries(_mm256_fmadd_ps(qb, cb1, pa)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lut + 32 * static_cast<size_t>(P)), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lut + 32 * static_cast<size_t>(P) + 16), b);
  }
  return sL;
}

TKV_AVX2_INT8 void int8_lut_dots_avx2(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                      const uint8_t* lut, int G, int32_t* dots, int ld) {
  if (k.dp % 64 != 0 || k.dp > kLutMaxDp || L.nparts < 1) return int8_lut_dots_ref(k, L, rows, n, lut, G, dots, ld);
  const size_t o0 = L.parts[0].planes[0].offset, lb = int8_lut_bytes(k.dp);
  const int nb = k.dp / 4;  // plane bytes a row: a multiple of 16
  alignas(32) uint8_t T[kLutMaxDp / 4 * 32];
  alignas(32) int32_t part[4][32];  // a short block's sums
  for (int r0 = 0; r0 < n; r0 += 32) {
    const int nr = std::min(32, n - r0);
    const uint8_t* rp[32];
    for (int i = 0; i < 32; ++i) rp[i] = rows[r0 + std::min(i, nr - 1)];  // (a short block repeats its last row)
    for (int m = 0; m < nb; m += 16) transpose16x32(rp, o0 + static_cast<size_t>(m), T + 32 * m);
    for (int j0 = 0; j0 < G; j0 += 4) {
      const int nj = std::min(4, G - j0);
      const uint8_t* tab[4];
      int32_t* out[4];  // a whole block's straight into dots
      for (int jj = 0; jj < nj; ++jj) {
        tab[jj] = lut + static_cast<size_t>(j0 + jj) * lb;
        out[jj] = nr == 32 ? dots + static_cast<size_t>(j0 + jj) * ld + r0 : part[jj];
      }
      with_count(nj, [&](auto c) TKV_AVX2_INT8 { lut_block<c>(T, nb, tab, out); });
      if (nr < 32)
        for (int jj = 0; jj < nj; ++jj)
          std::memcpy(dots + static_cast<size_t>(j0 + jj) * ld + r0, part[jj], sizeof(int32_t) * static_cast<size_t>(nr));
    }
  }
}

// V's pair tables (score_int8.h, Int8Keys::vlut), in int8_values_order
// (position 64c + 16s + b holds coordinate 64c + 4b + s).
//
// Per block of up to 32 rows, shared by the queries: per pair of rows (a, b)
// and chunk of 64 coordinates, two vectors of table indices. Row a's 16
// plane bytes in lane 0 and shifted right by 2 in lane 1, row b's shifted
// left by 2 in lane 0 and as they are in lane 1, masked (0x33, 0xCC) and
// or-ed: each byte's low nibble is code(a) | code(b) << 2 of coordinate 4b
// (lane 0) or 4b + 1 (lane 1): positions 0-31; the high nibble those of 4b
// + 2 and 4b + 3: positions 32-63.
// Per query: the weight bytes (int8_weights) times the four c8 on 16 bits
// (vpmullw, 16 a vector), + 64 >> 7, packed to bytes: rows 0, 1, 4, 5 in
// lane 0 and 2, 3, 6, 7 in lane 1 of each 8; two vpshufb read a pair's r_a
// (x & 3) and r_b (x >> 2), added and flipped by 128: the pair's 16-byte
// table. Then per pair and 32 positions one vpshufb, summed as in the key
// tables (lut_block): two pairs' lookups added as words into A, their high
// bytes into B; position 2w = A − 256 B, 2w + 1 = B (mod 2^16; exact while
// 16 pairs of at most 252 stay below 2^16). Per 8 rows, 64 positions and a
// query: 8 lookups and 12 adds and shifts, where values_quads takes 16
// vpmaddubsw and 8 vpmaddwd on the one multiply pipe. Called for k.vlut
// alone (one part, dp a multiple of 64 up to kLutMaxDp: int8_keys_prepare).
TKV_AVX2_INT8 void int8_vlut_values_avx2(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                         const float* w, int G, int ldw, float* acc) {
  const size_t o0 = L.parts[0].planes[0].offset;
  const int nch = k.dp / 64;
  alignas(32) __m256i idx[kMaxRows / 2][kLutMaxDp / 64][2];
  alignas(32) uint8_t tab[kMaxRows / 2][16];
  alignas(32) uint8_t w8[kMaxRows + 8];
  const __m256i m33 = _mm256_set1_epi8(0x33), mcc = _mm256_set1_epi8(static_cast<char>(0xCC));
  const __m256i m4 = _mm256_set1_epi8(15), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  // c8 of codes 0-3 as words, four times; the weight bytes' spread: word
  // 4i + c of lane l (8 rows' bytes broadcast) = byte 2l + i (rows 0-3:
  // 0, 1 | 2, 3), or + 4 (rows 4-7).
  __m256i c16;
  {
    alignas(32) int16_t cw[16];
    for (int x = 0; x < 16; ++x) cw[x] = static_cast<int16_t>(int(k.table[0][x & 3]) - 128);
    c16 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cw));
  }
  const char z = static_cast<char>(0x80);
  const __m256i spread0 = _mm256_setr_epi8(0, z, 0, z, 0, z, 0, z, 1, z, 1, z, 1, z, 1, z,  //
                                           2, z, 2, z, 2, z, 2, z, 3, z, 3, z, 3, z, 3, z);
  const __m256i spread1 = _mm256_add_epi8(spread0, _mm256_setr_epi8(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0,  //
                                                                      4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0));
  // Table patterns: r_a (x & 3) and r_b (x >> 2) of a lane's first pair (bytes
  // 0-7) and of its second (8-15).
  __m256i pa[2], pb[2];
  {
    alignas(32) uint8_t a8[2][32], b8[2][32];
    for (int h = 0; h < 2; ++h)
      for (int x = 0; x < 32; ++x) {
        a8[h][x] = static_cast<uint8_t>(8 * h + (x & 3));
        b8[h][x] = static_cast<uint8_t>(8 * h + 4 + ((x & 15) >> 2));
      }
    for (int h = 0; h < 2; ++h) {
      pa[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(a8[h]));
      pb[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(b8[h]));
    }
  }
  const __m256i r64 = _mm256_set1_epi16(64);
  for (int r0 = 0; r0 < n; r0 += kMaxRows) {
    const int nr = std::min(kMaxRows, n - r0), np = (nr + 1) / 2;
    const uint8_t* const* rr = rows + r0;
    for (int P = 0; P < np; ++P) {
      const uint8_t* ra = rr[2 * P];
      const uint8_t* rb = rr[std::min(2 * P + 1, nr - 1)];  // (an odd block's last pair: weight 0)
      for (int c = 0; c < nch; ++c) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ra + o0 + 16 * static_cast<size_t>(c)));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rb + o0 + 16 * static_cast<size_t>(c)));
        const __m256i A = _mm256_set_m128i(_mm_srli_epi16(a, 2), a), B = _mm256_set_m128i(b, _mm_slli_epi16(b, 2));
        const __m256i x = _mm256_or_si256(_mm256_and_si256(A, m33), _mm256_and_si256(B, mcc));
        _mm256_store_si256(&idx[P][c][0], _mm256_and_si256(x, m4));
        _mm256_store_si256(&idx[P][c][1], _mm256_and_si256(_mm256_srli_epi16(x, 4), m4));
      }
    }
    const int np2 = (np + 1) / 2;  // pairs of pairs (an odd count's last: a table of 128s)
    const __m256i bias = _mm256_set1_epi16(static_cast<int16_t>(128 * 2 * np2));
    std::fill(w8 + nr, w8 + sizeof(w8), uint8_t{0});  // (weights8 writes nr bytes: rows past them weigh 0)
    for (int j = 0; j < G; ++j) {
      const float ws = weights8(w + static_cast<size_t>(j) * ldw + r0, nr, w8);
      if (ws == 0.0f) continue;
      const float f = ws * k.cs * 128.0f;
      const __m256 fv = _mm256_set1_ps(f);
      // The tables, 8 rows (4 pairs) at a time.
      for (int r = 0; r < 2 * np; r += 8) {
        long long w8r;
        std::memcpy(&w8r, w8 + r, 8);
        const __m256i wb = _mm256_set1_epi64x(w8r);
        auto prod = [&](__m256i spread) TKV_AVX2_INT8 {
          const __m256i p = _mm256_mullo_epi16(_mm256_shuffle_epi8(wb, spread), c16);
          return _mm256_srai_epi16(_mm256_add_epi16(p, r64), 7);
        };
        const __m256i R = _mm256_packs_epi16(prod(spread0), prod(spread1));  // rows 0 1 4 5 | 2 3 6 7
        const __m256i t0 = _mm256_xor_si256(_mm256_add_epi8(_mm256_shuffle_epi8(R, pa[0]), _mm256_shuffle_epi8(R, pb[0])), flip);
        const __m256i t1 = _mm256_xor_si256(_mm256_add_epi8(_mm256_shuffle_epi8(R, pa[1]), _mm256_shuffle_epi8(R, pb[1])), flip);
        // t0: pairs r/2 (lane 0), r/2 + 1 (lane 1); t1: r/2 + 2, r/2 + 3.
        _mm_store_si128(reinterpret_cast<__m128i*>(tab[r / 2]), _mm256_castsi256_si128(t0));
        _mm_store_si128(reinterpret_cast<__m128i*>(tab[r / 2 + 1]), _mm256_extracti128_si256(t0, 1));
        _mm_store_si128(reinterpret_cast<__m128i*>(tab[r / 2 + 2]), _mm256_castsi256_si128(t1));
        _mm_store_si128(reinterpret_cast<__m128i*>(tab[r / 2 + 3]), _mm256_extracti128_si256(t1, 1));
      }
      // (An odd count's filler, table np, is in the last 8 rows built: weight
      // bytes 0, r = 0, every entry 128, counted in the bias.)
      for (int c = 0; c < nch; ++c) {
        __m256i A0 = _mm256_setzero_si256(), B0 = A0, A1 = A0, B1 = A0;
        for (int P = 0; P < 2 * np2; P += 2) {
          const __m256i ta = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(tab[P])));
          const __m256i tb = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(tab[P + 1])));
          // (the second pair of an odd count: the first's indices, a table of 128s)
          const int Q = P + 1 < np ? P + 1 : P;
          const __m256i x0 = _mm256_shuffle_epi8(ta, _mm256_load_si256(&idx[P][c][0]));
          const __m256i y0 = _mm256_shuffle_epi8(tb, _mm256_load_si256(&idx[Q][c][0]));
          const __m256i x1 = _mm256_shuffle_epi8(ta, _mm256_load_si256(&idx[P][c][1]));
          const __m256i y1 = _mm256_shuffle_epi8(tb, _mm256_load_si256(&idx[Q][c][1]));
          A0 = _mm256_add_epi16(A0, _mm256_add_epi16(x0, y0));
          B0 = _mm256_add_epi16(B0, _mm256_add_epi16(_mm256_srli_epi16(x0, 8), _mm256_srli_epi16(y0, 8)));
          A1 = _mm256_add_epi16(A1, _mm256_add_epi16(x1, y1));
          B1 = _mm256_add_epi16(B1, _mm256_add_epi16(_mm256_srli_epi16(x1, 8), _mm256_srli_epi16(y1, 8)));
        }
        float* out = acc + static_cast<size_t>(j) * k.dp + 64 * static_cast<size_t>(c);
        auto put = [&](__m256i Av, __m256i Bv, float* o) TKV_AVX2_INT8 {
          const __m256i even = _mm256_sub_epi16(_mm256_sub_epi16(Av, _mm256_slli_epi16(Bv, 8)), bias);
          const __m256i odd = _mm256_sub_epi16(Bv, bias);
          const __m256i u0 = _mm256_unpacklo_epi16(even, odd), u1 = _mm256_unpackhi_epi16(even, odd);
          // u0: positions 0-7 | 16-23, u1: 8-15 | 24-31
          const __m128i q[4] = {_mm256_castsi256_si128(u0), _mm256_castsi256_si128(u1), _mm256_extracti128_si256(u0, 1),
                                _mm256_extracti128_si256(u1, 1)};
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(q[i]));
            _mm256_storeu_ps(o + 8 * i, _mm256_add_ps(_mm256_loadu_ps(o + 8 * i), _mm256_mul_ps(v, fv)));
          }
        };
        put(A0, B0, out);
        put(A1, B1, out + 32);
      }
    }
  }
}

}  // namespace tkv::attn

#else

namespace tkv::attn {
bool int8_avx2_cpu() { return false; }
}  // namespace tkv::attn

#endif
