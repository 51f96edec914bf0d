// Per-target reader of trellis rows (tt, ttc; RowLayout kind kTrellis) for
// the SIMD attention core (attention_simd.cpp includes this once per Highway
// target). A row is a 16-bit scale, then one bit stream whose codes are
// stored most significant bit first, so coordinate i's state is the 6-bit
// window of stream bits e_i - 6 .. e_i - 1 (codec/trellis.h): row bits
// e_i + 10 .. e_i + 15, the row scale's word zeroed for the zeros before the
// stream. AVX-512 targets use vpermi2w; the others a 4-byte load per window
// and a table load (AVX2: 2.2x the codec path, 0.3x tq2; two gathers per 8
// lanes were no faster; RESULTS §17.4).
#if defined(TKV_ATTENTION_TRELLIS_READ_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TKV_ATTENTION_TRELLIS_READ_INL_H_
#undef TKV_ATTENTION_TRELLIS_READ_INL_H_
#else
#define TKV_ATTENTION_TRELLIS_READ_INL_H_
#endif

#include <cstring>

#include <hwy/highway.h>

#include "attention/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace tkv::attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Per chunk of 16 coordinates: its first coordinate and part, and for lane j
// the row's 16-bit words w, w + 1 that hold the lane's window (32-bit lane j
// of a vpermi2w) and the window's shift in them. 8 KB for d = 1024.
struct TrellisConsts {
  int chunks = 0;
  int pos[64], part[64];
  HWY_ALIGN uint16_t words[64][32];
  HWY_ALIGN uint32_t shift[64][16];
  // Other targets (each fills only what it reads): lane j's window starts at
  // row bit `bit`; `keep` clears the bits a window of the first coordinates
  // takes from the row scale.
  uint16_t bit[64][16];
  uint8_t keep[64][16];
  const float* table[RowLayout::kMaxParts];  // the parts' 64-entry window tables
};

HWY_INLINE void MakeTrellisConsts(const RowReader& R, TrellisConsts& t) {
  t.chunks = 0;
  int e = 0;  // stream bits before the part
  for (int p = 0; p < R.layout.nparts; ++p) {
    const RowLayout::Part& part = R.layout.parts[p];
    t.table[p] = R.tables[p];
    for (int c = 0; c < part.count; c += 16) {
      const int k = t.chunks++;
      t.pos[k] = part.begin + c;
      t.part[k] = p;
      for (int j = 0; j < 16; ++j) {
        const int q = e + (c + j + 1) * part.bits + 10;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // what TrellisChunks reads on this target
        t.words[k][2 * j] = static_cast<uint16_t>(q >> 4);
        t.words[k][2 * j + 1] = static_cast<uint16_t>(((q >> 4) + 1) & 63);
        t.shift[k][j] = static_cast<uint32_t>(q & 15);
#else
        t.bit[k][j] = static_cast<uint16_t>(q);
        t.keep[k][j] = static_cast<uint8_t>(q >= 16 ? 63 : (63u << (16 - q)) & 63);
#endif
      }
    }
    e += part.count * part.bits;
  }
}

// Calls fn(pos, v0, v1, v2, v3) for every chunk of 4 rows: per row its 128
// bytes as 64 words in two registers (the scale word zeroed); per chunk one
// vpermi2w brings each lane its two words, a shift and a mask give the
// window, and the 64-entry table is two vpermi2ps and a blend on bit 5.
template <class Fn>
HWY_INLINE void TrellisChunks(const TrellisConsts& t, const uint8_t* const* rows, Fn&& fn) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  using DF = hn::ScalableTag<float>;
  __m512i lo[4], hi[4];
  for (int r = 0; r < 4; ++r) {
    lo[r] = _mm512_maskz_mov_epi16(0xFFFFFFFEu, _mm512_loadu_si512(rows[r]));
    hi[r] = _mm512_loadu_si512(rows[r] + 64);
  }
  const __m512i m63 = _mm512_set1_epi32(63), b5 = _mm512_set1_epi32(32);
  int cur = -1;
  __m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
  for (int k = 0; k < t.chunks; ++k) {
    if (t.part[k] != cur) {
      cur = t.part[k];
      const float* tb = t.table[cur];
      t0 = _mm512_loadu_ps(tb);
      t1 = _mm512_loadu_ps(tb + 16);
      t2 = _mm512_loadu_ps(tb + 32);
      t3 = _mm512_loadu_ps(tb + 48);
    }
    const __m512i widx = _mm512_load_si512(t.words[k]);
    const __m512i sh = _mm512_load_si512(t.shift[k]);
    hn::Vec<DF> v[4];
    for (int r = 0; r < 4; ++r) {
      const __m512i win = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi16(lo[r], widx, hi[r]), sh), m63);
      const __m512 a = _mm512_permutex2var_ps(t0, win, t1), b = _mm512_permutex2var_ps(t2, win, t3);
      v[r] = hn::Vec<DF>{_mm512_mask_blend_ps(_mm512_test_epi32_mask(win, b5), a, b)};
    }
    fn(t.pos[k], v[0], v[1], v[2], v[3]);
  }
#else
  using DF = hn::ScalableTag<float>;
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  HWY_ALIGN float v[4][16];
  for (int k = 0; k < t.chunks; ++k) {
    const float* tb = t.table[t.part[k]];
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 16; ++j) {
        uint32_t w;  // rows are readable 16 bytes past their end (SafeRow)
        std::memcpy(&w, rows[r] + (t.bit[k][j] >> 3), 4);
        v[r][j] = tb[(w >> (t.bit[k][j] & 7)) & t.keep[k][j]];
      }
    for (int s = 0; s < 16; s += N)
      fn(t.pos[k] + s, hn::Load(df, v[0] + s), hn::Load(df, v[1] + s), hn::Load(df, v[2] + s),
         hn::Load(df, v[3] + s));
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv::attn
HWY_AFTER_NAMESPACE();

#endif  // TKV_ATTENTION_TRELLIS_READ_INL_H_
