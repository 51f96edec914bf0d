// SIMD attention core (Highway, runtime dispatch). Per block of 32 rows: decode
// each K row once into L1 (codes -> centroid floats via lane permutes), dot it
// with every query of the group, online softmax, then decode each V row once
// and accumulate it for every query. Memory traffic is the compressed rows
// only; queries and accumulators stay in L1.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "attention/kernel.h"
#include "util/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/aligned_allocator.h>
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// Row decoders per kind (Decode, RowScale) and the DF/DI/DU tags.
#include "attention/row_decode-inl.h"
// The trellis row reader (TrellisConsts, TrellisChunks).
#include "attention/trellis_read-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tkv::attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int Lanes() { return static_cast<int>(hn::Lanes(DF())); }

bool FastOk(const RowLayout& L, int d) {
  const int N = Lanes();
  if (d % N != 0 || N > 16) return false;
  switch (L.kind) {
    case RowLayout::Kind::kF32:
    case RowLayout::Kind::kF16:
    case RowLayout::Kind::kBF16:
      return true;
    case RowLayout::Kind::kQ8_0:
    case RowLayout::Kind::kQ4_0:
      return 32 % N == 0;
    case RowLayout::Kind::kE8:
      return d % 8 == 0 && (N <= 8 || N == 16);  // a chunk is part of a group, or two
    case RowLayout::Kind::kTrellis: {
      // Parts in whole chunks of 16 coordinates; the row within the 128
      // bytes a reader loads (two 64-byte loads on AVX-512).
      if (16 % N != 0) return false;
      size_t bits = 0;
      for (int p = 0; p < L.nparts; ++p) {
        if (L.parts[p].begin % 16 != 0 || L.parts[p].count % 16 != 0) return false;
        bits += size_t(L.parts[p].count) * L.parts[p].bits;
      }
      return 2 + (bits + 7) / 8 <= 128;
    }
    case RowLayout::Kind::kOpaque: return false;  // rows only the codec decodes
    case RowLayout::Kind::kTurbo:
      if (N < 8) return false;  // planes need whole bytes per chunk
      for (int p = 0; p < L.nparts; ++p)
        if (L.parts[p].begin % N != 0 || L.parts[p].count % N != 0) return false;
      return true;
  }
  return false;
}

// A part of a tq row (count a multiple of N) is read in "blocks" of k·N
// coordinates, k in {8, 4, 2, 1}: as many 8N blocks as fit, then one each of
// 4N, 2N, N for the rest (k <= 4 for 8-bit planes). Inside a block, position
// s·N + i holds coordinate k·i + s: lane i's k codes of a w-bit plane are k·w
// contiguous bits (1 to 32) that one load (and, below 8 bits, one permute)
// brings into the lane, after which every sub-chunk s is a shift and a mask.
// Queries and accumulators are permuted to match (FillPerm).
struct Block {
  int pos0, k;
};
constexpr int kMaxBlocks = 1024 / 8 / 4 + 3;  // d <= 1024, N >= 8, k >= 4 but for the tail

HWY_INLINE int MaxWidth(const RowLayout::Part& part) {
  int w = 0;
  for (int k = 0; k < part.nplanes; ++k) w = std::max(w, part.planes[k].width);
  return w;
}

HWY_INLINE int PartBlocks(const RowLayout::Part& part, Block* out) {
  const int N = Lanes();
  const int kmax = MaxWidth(part) == 8 ? 4 : 8;  // at most 32 bits per lane and plane
  int n = 0, pos = part.begin, left = part.count / N;
  for (; left >= kmax; left -= kmax, pos += kmax * N) out[n++] = {pos, kmax};
  for (int k = kmax / 2; k >= 1; k /= 2)
    if (left >= k) {
      out[n++] = {pos, k};
      pos += k * N;
      left -= k;
    }
  return n;
}

// perm[pos] = coordinate read at position pos (identity outside tq parts).
void FillPerm(const RowLayout& L, int dp, int* perm) {
  const int N = Lanes();
  for (int i = 0; i < dp; ++i) perm[i] = i;
  if (L.kind != RowLayout::Kind::kTurbo) return;
  Block blocks[kMaxBlocks];
  for (int p = 0; p < L.nparts; ++p) {
    const int nb = PartBlocks(L.parts[p], blocks);
    for (int b = 0; b < nb; ++b)
      for (int sub = 0; sub < blocks[b].k; ++sub)
        for (int i = 0; i < N; ++i) perm[blocks[b].pos0 + sub * N + i] = blocks[b].pos0 + blocks[b].k * i + sub;
  }
}

// Per-call constants for reading tq rows.
struct TurboConsts {
  struct Part {
    int begin, nplanes, levels, nblocks;
    int width[3];
    size_t offset[3];
    Block blocks[kMaxBlocks];
    hn::Vec<DF> t0, t1;  // centroid table, first and second N entries
    hn::Vec<DF> trep;    // the table repeated with period `levels` (<= N): index bits above are ignored
    const float* table;
  };
  // For L = 1, 2, 4 bits per lane: lane i's shift (i·L mod 32) in its word,
  // and, where N·L > 32 (4 bits on AVX-512), which word of a 16-byte load it is.
  hn::Vec<DU> sh[3];
  decltype(hn::IndicesFromVec(DU(), hn::Zero(DU()))) idx4;
  int nparts = 0;
  Part parts[RowLayout::kMaxParts];
  TrellisConsts trellis;  // trellis rows (tt, ttc): trellis_read-inl.h
};

HWY_INLINE void MakeTurboConsts(const RowReader& R, TurboConsts& tc) {
  const DF df;
  const DU du;
  const int N = Lanes();
  const auto lane = hn::Iota(du, 0);
  for (int j = 0; j < 3; ++j) tc.sh[j] = hn::And(hn::ShiftLeftSame(lane, j), hn::Set(du, 31u));  // i · 2^j
  tc.idx4 = hn::IndicesFromVec(du, hn::ShiftRight<5>(hn::ShiftLeft<2>(lane)));
  tc.nparts = R.layout.nparts;
  for (int p = 0; p < tc.nparts; ++p) {
    const RowLayout::Part& src = R.layout.parts[p];
    TurboConsts::Part& dst = tc.parts[p];
    dst.begin = src.begin;
    dst.nplanes = src.nplanes;
    dst.levels = 1 << src.bits;
    dst.nblocks = PartBlocks(src, dst.blocks);
    dst.table = R.tables[p];
    dst.t0 = hn::LoadU(df, R.tables[p]);
    dst.t1 = hn::LoadU(df, R.tables[p] + (2 * N <= kMaxTable ? N : 0));
    HWY_ALIGN float rep[hn::MaxLanes(df)] = {};
    for (int j = 0; j < N; ++j) rep[j] = R.tables[p][j % std::min(dst.levels, N)];
    dst.trep = hn::Load(df, rep);
    for (int k = 0; k < 3; ++k) {
      dst.width[k] = k < src.nplanes ? src.planes[k].width : 0;
      dst.offset[k] = k < src.nplanes ? src.planes[k].offset : 0;
    }
  }
}

// Lane i gets the `lane_bits` (1..32, a power of two) bits at i·lane_bits of src.
HWY_INLINE hn::Vec<DU> LaneWords(const TurboConsts& tc, const uint8_t* src, int lane_bits) {
  const DU du;
  if (lane_bits == 8) return hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, DU>(), src));
  if (lane_bits == 16)
    return hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint16_t, DU>(), reinterpret_cast<const uint16_t*>(src)));
  if (lane_bits == 32) return hn::LoadU(du, reinterpret_cast<const uint32_t*>(src));
  const int j = lane_bits == 1 ? 0 : lane_bits == 2 ? 1 : 2;
  // N·lane_bits <= 32 bits (1 or 2 bits on AVX-512, up to 4 on AVX2): one
  // broadcast word that every lane shifts by its own offset, no permute.
  if (Lanes() * lane_bits <= 32) {
    uint32_t word;
    std::memcpy(&word, src, 4);  // rows have 16 readable bytes past their end (SafeRow)
    return hn::Shr(hn::Set(du, word), tc.sh[j]);
  }
  // Else (4 bits on AVX-512): N·lane_bits <= 64 bits, inside one 16-byte load.
  const auto words = hn::LoadDup128(du, reinterpret_cast<const uint32_t*>(src));
  return hn::Shr(hn::TableLookupLanes(words, tc.idx4), tc.sh[j]);
}

// Copies rows that end within 16 bytes of the buffer end, so decoders may
// over-read (LoadDup128) safely.
// (Trellis readers load 128 bytes from a row's start: `reach`.)
HWY_INLINE const uint8_t* SafeRow(const uint8_t* row, size_t bytes, const uint8_t* end, uint8_t* scratch,
                                  size_t reach = 0) {
  const size_t need = std::max(bytes + 16, reach);
  if (row + need <= end) return row;
  std::memcpy(scratch, row, bytes);
  std::memset(scratch + bytes, 0, need - bytes);
  return scratch;
}

// Sums of the lanes of 4 vectors, written to out[0..3]. Interleaves inside
// 128-bit blocks, then folds the blocks: ~3 ops per sum instead of a full
// horizontal reduction each.
HWY_INLINE void Sum4(hn::Vec<DF> v0, hn::Vec<DF> v1, hn::Vec<DF> v2, hn::Vec<DF> v3, float* out) {
  const DF df;
#if HWY_TARGET == HWY_SCALAR
  (void)df;
  out[0] = hn::GetLane(v0);
  out[1] = hn::GetLane(v1);
  out[2] = hn::GetLane(v2);
  out[3] = hn::GetLane(v3);
#else
  const int N = Lanes();
  const hn::Repartition<uint64_t, DF> d64;
  const auto t01 = hn::Add(hn::InterleaveLower(df, v0, v1), hn::InterleaveUpper(df, v0, v1));
  const auto t23 = hn::Add(hn::InterleaveLower(df, v2, v3), hn::InterleaveUpper(df, v2, v3));
  const auto a = hn::BitCast(df, hn::InterleaveLower(d64, hn::BitCast(d64, t01), hn::BitCast(d64, t23)));
  const auto b = hn::BitCast(df, hn::InterleaveUpper(d64, hn::BitCast(d64, t01), hn::BitCast(d64, t23)));
  auto x = hn::Add(a, b);  // each 128-bit block: partial sums of v0, v1, v2, v3
  const DI di;
  for (int s = 4; s < N; s *= 2)
    x = hn::Add(x, hn::TableLookupLanes(x, hn::IndicesFromVec(df, hn::Xor(hn::Iota(di, 0), hn::Set(di, s)))));
  HWY_ALIGN float tmp[hn::MaxLanes(df) < 4 ? 4 : hn::MaxLanes(df)];
  hn::Store(x, df, tmp);
  out[0] = tmp[0];
  out[1] = tmp[1];
  out[2] = tmp[2];
  out[3] = tmp[3];
#endif
}

// The per-chunk bodies are lambdas called from many block-size and plane-width
// instantiations; forced inline so each stays in registers (GCC otherwise
// stops inlining once the instantiations add up: -10% on tq4 decode).
#if defined(TKV_SANITIZED)
#define TKV_FLATTEN_LAMBDA  // the sanitizer build checks memory, not speed: inlining all of them triples its compile time
#else
#define TKV_FLATTEN_LAMBDA __attribute__((always_inline))
#endif

// Rows a block. The f32 path takes 32 (its decoded rows and scratch); the
// integer path 64 where its V kernel takes them in one call
// (int8_values_rows: one weight scale a query over the 64), which halves
// what a block costs besides its rows (a V call's weight bytes and f32
// flush, ~230 cycles; the scales' conversions, the softmax's reductions).
// One thread, 64K, d 128, G 4, ns a row and KV head (RESULTS §46): 32 rows
// tq4 15.4, tq3 16.2-16.8, tq2 13.4-14.9; 64 rows 13.9-14.2, 14.6, 11.6-11.8.
// tq2's V kernel takes 128 (int8_values_rows; RESULTS §47, §50), with its
// own instantiation of the block code (HeadBlock<128>) so that the others
// keep theirs: p's stride chosen at run time cost tq3 and tq4 2-3 %.
constexpr int kBlockF32 = 32;
constexpr int kBlock = 64;      // p's stride for every block of 64 rows or fewer
constexpr int kBlockMax = 128;  // the most rows a block
// Rows are requested this far ahead of their use, a few lines per row
// processed, so the memory pipeline stays full without bursts.
constexpr int kPrefetchRows = 32;
// The integer paths ask for the next block of every head while they read
// this one (PrefetchSlice; since the 64-row blocks, one block ahead, in four
// phases). Measured per row and head at 64K (tq4 / tq3 / tq2,
// one thread): 32 rows ahead 13.7 / 14.8 / 12.6 ns, 64 ahead 15.0 / 15.2 /
// 13.3, 128 ahead 15.6 / 16.1 / 14.0, none 37 / 24 / 25: a block of K and V
// for 8 heads is ~34 KB at tq4, so two blocks in flight no longer fit L1.
// Both paths prefetch into L2 (__builtin_prefetch(p, 0, 2): prefetcht1):
// into L1 the lines ahead evicted the block in use. On a Zen 4 EPYC, 64K,
// d 128, 8 KV / 32 query heads, 2 threads, ms a step, L1 -> L2, alternated
// (RESULTS §44): f16 16.5-18.0 -> 12.4-13.0, tq4 7.4-8.7 -> 5.0-6.2, tq3
// 6.3-7.4 -> 5.4-6.4, tq2 4.4-5.0 -> 4.4-5.2 (the same).
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// 0 .. kBlockMax-1 as a table: Highway 1.0.3's Iota stores 16 scalars and
// reloads them as a vector (a stalled store forward: 20 % of ScoresInt8).
alignas(64) constexpr int32_t kRowIndex[kBlockMax] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                                   32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                                                   48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
                                                   64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
                                                   80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
                                                   96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
                                                   112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127};

// Rows of one block for one head: pointers (safe to over-read) and scales.
struct BlockRows {
  const uint8_t* row[kBlockF32];
  const uint8_t* ahead[kBlockF32];  // the row kPrefetchRows later in the stream (or null)
  size_t ahead_bytes = 0;
  float scale[kBlockF32];
  uint8_t scratch[kBlockF32][1024 + 64];  // copies of tq rows near the buffer end (<= 1026 bytes)
};

// Block loop of a tq part with planes W0, W1, W2 (0 = absent): per block,
// each row's plane words are loaded once and every sub-chunk is a shift, a
// mask and a table lookup. Calls fn(pos, k0, k1, k2, k3).
template <int W0, int W1, int W2, int K, class Fn>
HWY_INLINE void BlockRun(const TurboConsts& tc, const TurboConsts::Part& part, int pos0,
                         const uint8_t* const* rows, Fn&& fn) {
  const DF df;
  const DI di;
  const DU du;
  const int N = Lanes();
  const size_t rel = static_cast<size_t>(pos0 - part.begin);
  const size_t o0 = part.offset[0] + rel * W0 / 8;
  const size_t o1 = W1 ? part.offset[1] + rel * W1 / 8 : 0;
  const size_t o2 = W2 ? part.offset[2] + rel * W2 / 8 : 0;
  const auto m0 = hn::Set(du, W0 == 8 ? 255u : (1u << W0) - 1u);
  const auto m1 = hn::Set(du, W1 ? (1u << W1) - 1u : 0u);
  const auto m2 = hn::Set(du, W2 ? (1u << W2) - 1u : 0u);
  constexpr int kLevels = 1 << (W0 + W1 + W2);
  hn::Vec<DU> w0[4], w1[4], w2[4];
  for (int r = 0; r < 4; ++r) {
    w0[r] = LaneWords(tc, rows[r] + o0, K * W0);
    if (W1) w1[r] = LaneWords(tc, rows[r] + o1, K * W1);
    if (W2) w2[r] = LaneWords(tc, rows[r] + o2, K * W2);
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // every AVX-512 target
  if constexpr (W2 == 0 && W0 + W1 <= 5 && W0 < 8) {
    // Up to 32 levels: vpermps / vpermi2ps read only the low 4 / 5 index
    // bits, so bits above the code need no mask (the 16-entry table repeats
    // with the code's period), and a second plane joins with one bit select.
    (void)m0; (void)m1; (void)m2; (void)di;
    const auto low = hn::Set(du, (1u << W0) - 1u);
    for (int sub = 0; sub < K; ++sub) {
      hn::Vec<DF> k[4];
      for (int r = 0; r < 4; ++r) {
        auto code = hn::ShiftRightSame(w0[r], sub * W0);
        if constexpr (W1 != 0) {
          const int up = W0 - sub * W1;  // moves plane 1's bits for this sub-chunk to bit W0
          const auto hi = up >= 0 ? hn::ShiftLeftSame(w1[r], up) : hn::ShiftRightSame(w1[r], -up);
          code = hn::IfVecThenElse(low, code, hi);
        }
        if constexpr (kLevels <= 16) {
          k[r] = hn::Vec<DF>{_mm512_permutexvar_ps(code.raw, part.trep.raw)};
        } else {
          k[r] = hn::Vec<DF>{_mm512_permutex2var_ps(part.t0.raw, code.raw, part.t1.raw)};
        }
      }
      fn(pos0 + sub * N, k[0], k[1], k[2], k[3]);
    }
    return;
  }
  if constexpr (kLevels > 32) {
    // 64 / 128 / 256 levels (6, 7, 8 bits): a two-table permute per 32
    // entries, then a tree of blends on index bits 5, 6, 7 instead of a gather.
    // The plane sets of these widths: 8, 4+2, 4+2+1 (plane_widths).
    static_assert((W0 == 8 && W1 == 0) || (W0 == 4 && W1 == 2 && W2 <= 1), "unexpected planes for 6-8 bits");
    (void)m0; (void)m1; (void)m2; (void)di;
    constexpr int kTables = kLevels / 32;
    __m512 t[2 * kTables];
    for (int i = 0; i < 2 * kTables; ++i) t[i] = _mm512_loadu_ps(part.table + 16 * i);
    const auto low4 = hn::Set(du, 15u), low6 = hn::Set(du, 63u);
    for (int sub = 0; sub < K; ++sub) {
      hn::Vec<DF> k[4];
      for (int r = 0; r < 4; ++r) {
        auto code = hn::ShiftRightSame(w0[r], sub * W0);  // bits above the code are ignored below
        if constexpr (W1 != 0) {  // 4 + 2 (+ 1) planes
          const int up1 = 4 - sub * 2;  // plane 1's 2 bits of this sub-chunk to bits 4-5
          code = hn::IfVecThenElse(low4, code, up1 >= 0 ? hn::ShiftLeftSame(w1[r], up1) : hn::ShiftRightSame(w1[r], -up1));
        }
        if constexpr (W2 != 0) {
          const int up2 = 6 - sub;  // plane 2's bit to bit 6
          code = hn::IfVecThenElse(low6, code, up2 >= 0 ? hn::ShiftLeftSame(w2[r], up2) : hn::ShiftRightSame(w2[r], -up2));
        }
        const __m512i ci = code.raw;
        __m512 v[kTables];
        for (int i = 0; i < kTables; ++i) v[i] = _mm512_permutex2var_ps(t[2 * i], ci, t[2 * i + 1]);
        for (int bit = 5, n = kTables; n > 1; ++bit, n /= 2) {
          const __mmask16 m = _mm512_test_epi32_mask(ci, _mm512_set1_epi32(1 << bit));
          for (int i = 0; i < n / 2; ++i) v[i] = _mm512_mask_blend_ps(m, v[2 * i], v[2 * i + 1]);
        }
        k[r] = hn::Vec<DF>{v[0]};
      }
      fn(pos0 + sub * N, k[0], k[1], k[2], k[3]);
    }
    return;
  }
#endif
  // Tables for the 4-lookup path below, loaded once per block.
  // (Zeroed first: GCC cannot see that the scalar target, N = 1, never
  // reads an entry it did not load, and warns.)
  hn::Vec<DF> tabs[4] = {hn::Zero(df), hn::Zero(df), hn::Zero(df), hn::Zero(df)};
  if (kLevels > 2 * N && kLevels <= 4 * N)
    for (int t = 0; t < kLevels / N; ++t) tabs[t] = hn::LoadU(df, part.table + t * N);
  for (int sub = 0; sub < K; ++sub) {
    hn::Vec<DF> k[4];
    for (int r = 0; r < 4; ++r) {
      auto code = hn::And(hn::ShiftRightSame(w0[r], sub * W0), m0);
      if (W1) code = hn::Or(code, hn::ShiftLeft<W0>(hn::And(hn::ShiftRightSame(w1[r], sub * W1), m1)));
      if (W2) code = hn::Or(code, hn::ShiftLeft<W0 + W1>(hn::And(hn::ShiftRightSame(w2[r], sub * W2), m2)));
      const auto ci = hn::BitCast(di, code);
      if (kLevels <= static_cast<int>(hn::MaxLanes(df)) && kLevels <= N) {
        k[r] = hn::TableLookupLanes(part.t0, hn::IndicesFromVec(df, ci));
      } else if (kLevels <= 2 * N) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // every AVX-512 target
        // One two-table permute (vpermi2ps) instead of two lookups and a blend.
        k[r] = hn::Vec<DF>{_mm512_permutex2var_ps(part.t0.raw, ci.raw, part.t1.raw)};
#else
        // Two lookups and one compare (ci < 2N): 12% faster for tq4 on AVX2
        // than the blend tree below, which tests the bit.
        const auto lo_idx = hn::IndicesFromVec(df, hn::And(ci, hn::Set(di, N - 1)));
        k[r] = hn::IfThenElse(hn::RebindMask(df, hn::Gt(ci, hn::Set(di, N - 1))),
                              hn::TableLookupLanes(part.t1, lo_idx), hn::TableLookupLanes(part.t0, lo_idx));
#endif
      } else if (kLevels <= 4 * N) {
        // 4 lookups in N-entry tables joined by a tree of blends on the index
        // bits above them: 1.27x a gather for 5 bits on AVX2 (8 lookups for
        // 6 bits were 0.92x, so wider codes keep the gather there).
        const auto lo_idx = hn::IndicesFromVec(df, hn::And(ci, hn::Set(di, N - 1)));
        hn::Vec<DF> v[4];
        const int nt = kLevels / N;
        for (int t = 0; t < nt; ++t) v[t] = hn::TableLookupLanes(tabs[t], lo_idx);
        for (int bit = N, n = nt; n > 1; bit *= 2, n /= 2) {
          const auto m = hn::RebindMask(df, hn::Ne(hn::And(ci, hn::Set(di, bit)), hn::Zero(di)));
          for (int i = 0; i < n / 2; ++i) v[i] = hn::IfThenElse(m, v[2 * i + 1], v[2 * i]);
        }
        k[r] = v[0];
      } else {
        k[r] = hn::GatherIndex(df, part.table, ci);
      }
    }
    fn(pos0 + sub * N, k[0], k[1], k[2], k[3]);
  }
}

template <int W0, int W1, int W2, class Fn>
HWY_INLINE void BlockLoop(const TurboConsts& tc, const TurboConsts::Part& part, const uint8_t* const* rows, Fn&& fn) {
  for (int b = 0; b < part.nblocks; ++b) {
    const Block& blk = part.blocks[b];
    switch (blk.k) {
      case 8:
        if constexpr (W0 < 8) BlockRun<W0, W1, W2, 8>(tc, part, blk.pos0, rows, fn);
        break;
      case 4: BlockRun<W0, W1, W2, 4>(tc, part, blk.pos0, rows, fn); break;
      case 2: BlockRun<W0, W1, W2, 2>(tc, part, blk.pos0, rows, fn); break;
      default: BlockRun<W0, W1, W2, 1>(tc, part, blk.pos0, rows, fn); break;
    }
  }
}

// Calls fn(pos, v0, v1, v2, v3) for every chunk position of 4 rows, decoding
// each row's chunk once.
template <Kind KIND, class Fn>
HWY_INLINE void ForEachChunk(const TurboConsts& tc, const uint8_t* const* rows, int dp, Fn&& fn) {
  const int N = Lanes();
  if constexpr (KIND == Kind::kTrellis) {
    (void)dp;
    (void)N;
    TrellisChunks(tc.trellis, rows, fn);
  } else if constexpr (KIND != Kind::kTurbo) {
    for (int c = 0; c < dp; c += N) {
      fn(c, Decode<KIND>(c, rows[0]), Decode<KIND>(c, rows[1]), Decode<KIND>(c, rows[2]), Decode<KIND>(c, rows[3]));
    }
  } else {
    for (int p = 0; p < tc.nparts; ++p) {
      const TurboConsts::Part& part = tc.parts[p];
      switch (part.width[0] * 100 + part.width[1] * 10 + part.width[2]) {
        case 400: BlockLoop<4, 0, 0>(tc, part, rows, fn); break;
        case 200: BlockLoop<2, 0, 0>(tc, part, rows, fn); break;
        case 100: BlockLoop<1, 0, 0>(tc, part, rows, fn); break;
        case 210: BlockLoop<2, 1, 0>(tc, part, rows, fn); break;
        case 410: BlockLoop<4, 1, 0>(tc, part, rows, fn); break;
        case 420: BlockLoop<4, 2, 0>(tc, part, rows, fn); break;
        case 421: BlockLoop<4, 2, 1>(tc, part, rows, fn); break;
        default: BlockLoop<8, 0, 0>(tc, part, rows, fn); break;  // 8 bits: the only other plane set
      }
    }
    // Zero padding past d: chunks of the padded row hold nothing.
  }
}

// Rows r .. r+3 of a block (the last one repeated past nb, so the 4-row code
// runs unchanged; callers give repeats zero weight or ignore their results).
HWY_INLINE void FourRows(const BlockRows& B, int r, int nr, const uint8_t** rows) {
  for (int i = 0; i < 4; ++i) rows[i] = B.row[r + std::min(i, nr - 1)];
}

HWY_INLINE void PrefetchAhead(const BlockRows& B, int r, int nr) {
  for (int i = 0; i < nr; ++i)
    if (const uint8_t* a = B.ahead[r + i])
      for (size_t o = 0; o < B.ahead_bytes; o += 64) __builtin_prefetch(a + o, 0, 2);
}

// p[j][r] = score of query j on row r (or -inf when masked), for 4 rows at a time.
template <Kind KIND>
void Scores(const RowReader& R, const TurboConsts& tc, const BlockRows& B, int nb, const float* qh, int G, const int* limit,
            const int* start, int b0, float* p) {
  const DF df;
  const int dp = R.dp;
  for (int r = 0; r < nb; r += 4) {
    const int nr = std::min(4, nb - r);
    const uint8_t* rows[4];
    FourRows(B, r, nr, rows);
    PrefetchAhead(B, r, nr);
    for (int j0 = 0; j0 < G; j0 += 4) {
      const int nj = std::min(4, G - j0);
      const float* q0p = qh + static_cast<size_t>(j0) * dp;
      const float* q1p = qh + static_cast<size_t>(j0 + std::min(1, nj - 1)) * dp;
      const float* q2p = qh + static_cast<size_t>(j0 + std::min(2, nj - 1)) * dp;
      const float* q3p = qh + static_cast<size_t>(j0 + std::min(3, nj - 1)) * dp;
      auto a00 = hn::Zero(df), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
      auto a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
      ForEachChunk<KIND>(tc, rows, dp, [&](int c, hn::Vec<DF> k0, hn::Vec<DF> k1, hn::Vec<DF> k2, hn::Vec<DF> k3) TKV_FLATTEN_LAMBDA {
        const auto q0 = hn::Load(df, q0p + c), q1 = hn::Load(df, q1p + c);
        const auto q2 = hn::Load(df, q2p + c), q3 = hn::Load(df, q3p + c);
        a00 = hn::MulAdd(k0, q0, a00); a01 = hn::MulAdd(k0, q1, a01);
        a02 = hn::MulAdd(k0, q2, a02); a03 = hn::MulAdd(k0, q3, a03);
        a10 = hn::MulAdd(k1, q0, a10); a11 = hn::MulAdd(k1, q1, a11);
        a12 = hn::MulAdd(k1, q2, a12); a13 = hn::MulAdd(k1, q3, a13);
        a20 = hn::MulAdd(k2, q0, a20); a21 = hn::MulAdd(k2, q1, a21);
        a22 = hn::MulAdd(k2, q2, a22); a23 = hn::MulAdd(k2, q3, a23);
        a30 = hn::MulAdd(k3, q0, a30); a31 = hn::MulAdd(k3, q1, a31);
        a32 = hn::MulAdd(k3, q2, a32); a33 = hn::MulAdd(k3, q3, a33);
      });
#if HWY_TARGET == HWY_SCALAR
      float dot4[4][4];
      Sum4(a00, a01, a02, a03, dot4[0]);
      Sum4(a10, a11, a12, a13, dot4[1]);
      Sum4(a20, a21, a22, a23, dot4[2]);
      Sum4(a30, a31, a32, a33, dot4[3]);
      for (int i = 0; i < nr; ++i) {
        const int row = b0 + r + i;
        for (int j = 0; j < nj; ++j)
          p[(j0 + j) * kBlock + r + i] =
              row < limit[j0 + j] && row >= start[j0 + j] ? dot4[i][j] * B.scale[r + i] : kNegInf;
      }
#else
      // Per query, its 4 rows' scores (Sum4 over the rows), scaled and masked
      // as one 4-lane vector: p is read back as vectors by the softmax, which
      // scalar stores would stall (store-to-load forwarding).
      const hn::Full128<float> d4;
      const hn::RebindToSigned<decltype(d4)> di4;
      const auto sc4 = hn::LoadU(d4, B.scale + r);
      const auto rows4 = hn::Add(hn::Iota(di4, 0), hn::Set(di4, b0 + r));
      HWY_ALIGN float dj[4][hn::MaxLanes(df) < 4 ? 4 : hn::MaxLanes(df)];
      Sum4(a00, a10, a20, a30, dj[0]);
      Sum4(a01, a11, a21, a31, dj[1]);
      Sum4(a02, a12, a22, a32, dj[2]);
      Sum4(a03, a13, a23, a33, dj[3]);
      for (int j = 0; j < nj; ++j) {
        const auto vis = hn::RebindMask(d4, hn::AndNot(hn::Lt(rows4, hn::Set(di4, start[j0 + j])),
                                                       hn::Lt(rows4, hn::Set(di4, limit[j0 + j]))));
        hn::StoreU(hn::IfThenElse(vis, hn::Mul(hn::Load(d4, dj[j]), sc4), hn::Set(d4, kNegInf)), d4,
                   p + (j0 + j) * kBlock + r);
      }
#endif
    }
  }
}

// acc[j] += Σ_r p[j][r] · scale_r · row_r, 4 rows at a time.
template <Kind KIND>
void Accumulate(const RowReader& R, const TurboConsts& tc, const BlockRows& B, int nb, const float* p, int G, const bool* keep,
                float* acch) {
  const DF df;
  const int dp = R.dp;
  for (int r = 0; r < nb; r += 4) {
    const int nr = std::min(4, nb - r);
    bool any = false;
    for (int i = 0; i < nr; ++i) any |= keep[r + i];
    PrefetchAhead(B, r, nr);
    if (!any) continue;
    const uint8_t* rows[4];
    FourRows(B, r, nr, rows);
    float f[4];
    for (int i = 0; i < 4; ++i) f[i] = (i < nr && keep[r + i]) ? B.scale[r + i] : 0.0f;
    // Up to 4 queries per pass; absent queries get zero weights on query 0's
    // accumulator, so every pass runs the same straight-line code.
    for (int j0 = 0; j0 < G; j0 += 4) {
      const int nj = std::min(4, G - j0);
      auto wt = [&](int j, int i) { return hn::Set(df, (j < nj && i < nr) ? p[(j0 + j) * kBlock + r + i] * f[i] : 0.0f); };
      const auto w00 = wt(0, 0), w01 = wt(0, 1), w02 = wt(0, 2), w03 = wt(0, 3);
      const auto w10 = wt(1, 0), w11 = wt(1, 1), w12 = wt(1, 2), w13 = wt(1, 3);
      const auto w20 = wt(2, 0), w21 = wt(2, 1), w22 = wt(2, 2), w23 = wt(2, 3);
      const auto w30 = wt(3, 0), w31 = wt(3, 1), w32 = wt(3, 2), w33 = wt(3, 3);
      float* a0 = acch + static_cast<size_t>(j0) * dp;
      float* a1 = acch + static_cast<size_t>(j0 + std::min(1, nj - 1)) * dp;
      float* a2 = acch + static_cast<size_t>(j0 + std::min(2, nj - 1)) * dp;
      float* a3 = acch + static_cast<size_t>(j0 + std::min(3, nj - 1)) * dp;
      if (nj == 4) {
        ForEachChunk<KIND>(tc, rows, dp, [&](int c, hn::Vec<DF> v0, hn::Vec<DF> v1, hn::Vec<DF> v2, hn::Vec<DF> v3) TKV_FLATTEN_LAMBDA {
          auto x0 = hn::Load(df, a0 + c), x1 = hn::Load(df, a1 + c);
          auto x2 = hn::Load(df, a2 + c), x3 = hn::Load(df, a3 + c);
          x0 = hn::MulAdd(w00, v0, x0); x1 = hn::MulAdd(w10, v0, x1);
          x2 = hn::MulAdd(w20, v0, x2); x3 = hn::MulAdd(w30, v0, x3);
          x0 = hn::MulAdd(w01, v1, x0); x1 = hn::MulAdd(w11, v1, x1);
          x2 = hn::MulAdd(w21, v1, x2); x3 = hn::MulAdd(w31, v1, x3);
          x0 = hn::MulAdd(w02, v2, x0); x1 = hn::MulAdd(w12, v2, x1);
          x2 = hn::MulAdd(w22, v2, x2); x3 = hn::MulAdd(w32, v2, x3);
          x0 = hn::MulAdd(w03, v3, x0); x1 = hn::MulAdd(w13, v3, x1);
          x2 = hn::MulAdd(w23, v3, x2); x3 = hn::MulAdd(w33, v3, x3);
          hn::Store(x0, df, a0 + c); hn::Store(x1, df, a1 + c);
          hn::Store(x2, df, a2 + c); hn::Store(x3, df, a3 + c);
        });
      } else {  // fewer queries: accumulate one at a time (stores must not alias)
        ForEachChunk<KIND>(tc, rows, dp, [&](int c, hn::Vec<DF> v0, hn::Vec<DF> v1, hn::Vec<DF> v2, hn::Vec<DF> v3) TKV_FLATTEN_LAMBDA {
          auto x0 = hn::Load(df, a0 + c);
          x0 = hn::MulAdd(w00, v0, x0); x0 = hn::MulAdd(w01, v1, x0);
          x0 = hn::MulAdd(w02, v2, x0); x0 = hn::MulAdd(w03, v3, x0);
          hn::Store(x0, df, a0 + c);
          if (nj > 1) {
            auto x1 = hn::Load(df, a1 + c);
            x1 = hn::MulAdd(w10, v0, x1); x1 = hn::MulAdd(w11, v1, x1);
            x1 = hn::MulAdd(w12, v2, x1); x1 = hn::MulAdd(w13, v3, x1);
            hn::Store(x1, df, a1 + c);
          }
          if (nj > 2) {
            auto x2 = hn::Load(df, a2 + c);
            x2 = hn::MulAdd(w20, v0, x2); x2 = hn::MulAdd(w21, v1, x2);
            x2 = hn::MulAdd(w22, v2, x2); x2 = hn::MulAdd(w23, v3, x2);
            hn::Store(x2, df, a2 + c);
          }
        });
      }
    }
  }
}

// Decodes nb rows (scale folded in) into out[i * dp], 4 rows at a time so tq
// rows use the super-chunk loop.
template <Kind KIND>
void DecodeRows(const RowReader& R, const TurboConsts& tc, const BlockRows& B, int nb, float* out) {
  const DF df;
  const int dp = R.dp;
  for (int r = 0; r < nb; r += 4) {
    const int nr = std::min(4, nb - r);
    const uint8_t* rows[4];
    FourRows(B, r, nr, rows);
    float* o[4];
    for (int i = 0; i < 4; ++i) o[i] = out + static_cast<size_t>(r + std::min(i, nr - 1)) * dp;
    if (R.gaps)  // coordinates outside every part are not visited below
      for (int i = 0; i < nr; ++i) std::memset(o[i], 0, sizeof(float) * dp);
    const auto s0 = hn::Set(df, B.scale[r]), s1 = hn::Set(df, B.scale[r + std::min(1, nr - 1)]);
    const auto s2 = hn::Set(df, B.scale[r + std::min(2, nr - 1)]), s3 = hn::Set(df, B.scale[r + std::min(3, nr - 1)]);
    // Duplicate rows (nr < 4) write the same values twice; harmless.
    ForEachChunk<KIND>(tc, rows, dp, [&](int c, hn::Vec<DF> v0, hn::Vec<DF> v1, hn::Vec<DF> v2, hn::Vec<DF> v3) TKV_FLATTEN_LAMBDA {
      hn::Store(hn::Mul(v0, s0), df, o[0] + c);
      hn::Store(hn::Mul(v1, s1), df, o[1] + c);
      hn::Store(hn::Mul(v2, s2), df, o[2] + c);
      hn::Store(hn::Mul(v3, s3), df, o[3] + c);
    });
  }
}

template <Kind K>
struct DecodeRowsOp {
  template <class... A>
  static void Run(A&&... a) { DecodeRows<K>(a...); }
};

template <template <Kind> class F, class... Args>
void ByKind(Kind k, Args&&... args);

// Fills B for rows [b0, b0+nb) of one head. With many queries (G > 4) or no
// SIMD decoder for the layout, rows are decoded once into `dec` (f32, scale
// folded in) so every query group reuses them; returns the kind to read B with.
Kind PrepareRows(const RowReader& R, const TurboConsts& tc, const RowSource& src, int h, const uint8_t* end, int b0,
                 int nb, int limit_rows, int G, BlockRows& B, float* dec) {
  const int dp = R.dp;
  const bool turbo = R.layout.kind == Kind::kTurbo, trellis = R.layout.kind == Kind::kTrellis;
  const bool scaled = turbo || trellis || R.layout.kind == Kind::kE8;  // a 16-bit row scale first
  // tq decoders load 16 bytes past a row, trellis readers 128 from its start.
  const bool wide_loads = (turbo || trellis) && R.fast;
  const size_t reach = trellis ? 128 : 0;
  B.ahead_bytes = R.row_bytes;
  for (int i = 0; i < nb; ++i) {
    const uint8_t* row = src.at(b0 + i, h);
    // Only a row that ends near the buffer end needs a copy.
    if (wide_loads && row + std::max(R.row_bytes + 16, reach) > end)
      row = SafeRow(row, R.row_bytes, end, B.scratch[i], reach);
    B.row[i] = row;
    const int fut = b0 + i + kPrefetchRows;
    B.ahead[i] = fut < limit_rows ? src.at(fut, h) : nullptr;
    B.scale[i] = scaled ? RowScale<Kind::kTurbo>(row) : 1.0f;
  }
  if (R.fast && G <= 4) return R.layout.kind;
  if (R.fast) {
    ByKind<DecodeRowsOp>(R.layout.kind, R, tc, B, nb, dec);
  } else {
    for (int i = 0; i < nb; ++i) {
      float* out = dec + static_cast<size_t>(i) * dp;
      R.codec->decode_unscaled(B.row[i], out);
      for (int c = R.d; c < dp; ++c) out[c] = 0.0f;
    }
  }
  for (int i = 0; i < nb; ++i) {
    B.row[i] = reinterpret_cast<const uint8_t*>(dec + static_cast<size_t>(i) * dp);
    B.scale[i] = 1.0f;
  }
  return Kind::kF32;
}

template <template <Kind> class F, class... Args>
void ByKind(Kind k, Args&&... args) {  // calls F<k>::Run(args...)
  switch (k) {
    case Kind::kF32: F<Kind::kF32>::Run(args...); break;
    case Kind::kF16: F<Kind::kF16>::Run(args...); break;
    case Kind::kBF16: F<Kind::kBF16>::Run(args...); break;
    case Kind::kQ8_0: F<Kind::kQ8_0>::Run(args...); break;
    case Kind::kQ4_0: F<Kind::kQ4_0>::Run(args...); break;
    case Kind::kTurbo: F<Kind::kTurbo>::Run(args...); break;
    case Kind::kE8: F<Kind::kE8>::Run(args...); break;
    case Kind::kTrellis: F<Kind::kTrellis>::Run(args...); break;
    case Kind::kOpaque: break;  // never fast (FastOk): PrepareRows decodes these to f32
  }
}
template <Kind K>
struct ScoresOp {
  template <class... A>
  static void Run(A&&... a) { Scores<K>(a...); }
};
template <Kind K>
struct AccumulateOp {
  template <class... A>
  static void Run(A&&... a) { Accumulate<K>(a...); }
};

// Whether a block's bs rows lie one stride apart: a contiguous cache, or a
// block of rows inside one page.
HWY_INLINE bool StrideRows(const RowSource& src, int b0, int nb, int bs) {
  return nb == bs && src.stride < (size_t{1} << 25) &&
         (!src.blocks || (b0 >> src.shift) == ((b0 + bs - 1) >> src.shift));
}

// Row pointers of one block of tq rows for head h (nb of them; bs when the
// rows lie one stride apart: pointers by the stride, no per-row address
// arithmetic).
HWY_INLINE void BlockRowPtrs(const RowSource& src, int h, int b0, int nb, int bs, const uint8_t** rows) {
  if (StrideRows(src, b0, nb, bs)) {
    const uint8_t* p0 = src.at(b0, h);
    for (int i = 0; i < bs; ++i) rows[i] = p0 + static_cast<size_t>(i) * src.stride;
    return;
  }
  for (int i = 0; i < nb; ++i) rows[i] = src.at(b0 + i, h);
}

// Row scales of one block of bs tq rows (rows from BlockRowPtrs; scale 0
// past nb). The scales are converted 16 at a time (unorm16_to_f32: the
// exponent rebased, code 0 is 0). K's are read after its kernel, whose
// loads have brought the rows into L1 (read before it, they were the
// rows' first touch: one thread, 64K, G 4, ns a row and head, 8 rounds:
// tq4 13.46 -> 12.91, tq3 13.51 -> 13.32, tq2 10.07 -> 9.96; RESULTS §51);
// V's before its kernel, which takes them in its weight bytes.
template <int KB>
HWY_INLINE void BlockScales(const RowSource& src, int b0, int nb, int bs, const uint8_t* const* rows,
                            float* scale) {
  const DF df;
  const DU du;
  const int N = Lanes();
  const auto bias = hn::Set(du, kUNormExpBias << 10);
  auto to_scale = [&](hn::Vec<DU> c, int i) HWY_ATTR {
    const auto f = hn::BitCast(df, hn::ShiftLeft<13>(hn::Add(c, bias)));
    hn::Store(hn::IfThenZeroElse(hn::RebindMask(df, hn::Eq(c, hn::Zero(du))), f), df, scale + i);
  };
  // The 16-bit scales by scalar loads stored as dwords, read back as
  // vectors once all are written (row_at(i): row i's start). vpgatherdd of
  // 16 (at the rows' starts by the stride) was ~30 cycles on a Zen 4 EPYC
  // with the lines in L1 (4 gathers 100-120 cycles a 64-row block; these
  // loads and stores 54-56: scripts/harness/gather_scales.cpp), and K's and
  // V's gathers had been ~4 cycles of a tq2 row's ~40 (RESULTS §47).
  auto scales = [&](auto row_at) HWY_ATTR {
    alignas(64) uint32_t code[KB];
    for (int i = 0; i < nb; ++i) {
      uint16_t c;
      std::memcpy(&c, row_at(i), 2);
      code[i] = c;
    }
    for (int i = nb; i < bs; ++i) code[i] = 0;
    for (int i = 0; i < bs; i += N) to_scale(hn::Load(du, code + i), i);
  };
  if (!StrideRows(src, b0, nb, bs)) return scales([&](int i) { return rows[i]; });
  // Rows one stride apart: the scales' loads by the stride too (reading the
  // pointers back from rows[] was 2 % more for tq2).
  const uint8_t* p0 = rows[0];
  const size_t st = src.stride;
#if HWY_TARGET == HWY_AVX2
  // AVX2 without AVX-512 (Zen 1-3, Intel client cores): eight scalar
  // loads put into one vector by inserts (no store: no stalled forward).
  // Zen 1 microcodes vpgatherdd: the gathers were 7 % of the attention's
  // samples at 64K (RESULTS §43).
  if (static_cast<size_t>(N) == 8) {
    for (int i = 0; i < bs; i += 8) {
      uint16_t c[8];
      for (int r = 0; r < 8; ++r) std::memcpy(&c[r], rows[i + r], 2);
      to_scale(hn::Vec<DU>{_mm256_setr_epi32(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7])}, i);
    }
    return;
  }
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // AVX-512: eight scales a vector by vpinsrw from memory, two vectors
  // widened by vpmovzxwd (no store and reload: 43 cycles a 64-row block
  // alone against 55, gather_scales.cpp mode 7; in the 64K step with the
  // prefetch and exp changes of RESULTS §51, 1-5 % a row).
  if (static_cast<size_t>(N) == 16) {
    auto eight = [&](const uint8_t* q) HWY_ATTR {
      uint16_t c[8];
      for (int r = 0; r < 8; ++r) std::memcpy(&c[r], q + r * st, 2);
      __m128i x = _mm_cvtsi32_si128(c[0]);
      x = _mm_insert_epi16(x, c[1], 1);
      x = _mm_insert_epi16(x, c[2], 2);
      x = _mm_insert_epi16(x, c[3], 3);
      x = _mm_insert_epi16(x, c[4], 4);
      x = _mm_insert_epi16(x, c[5], 5);
      x = _mm_insert_epi16(x, c[6], 6);
      return _mm_insert_epi16(x, c[7], 7);
    };
    for (int i = 0; i < bs; i += 16) {
      const uint8_t* r = p0 + static_cast<size_t>(i) * st;
      const __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(eight(r)), eight(r + 8 * st), 1);
      to_scale(hn::Vec<DU>{_mm512_cvtepu16_epi32(w)}, i);
    }
    return;
  }
#endif
  scales([&](int i) { return p0 + static_cast<size_t>(i) * st; });
}

// The integer paths' prefetch: the next block,
// requested in slices as the heads of the current block are processed
// (slice i of n for the i-th head): each future token's rows for all the
// item's heads, one request per cache line. (Per row and head, as the f32
// path does it, the same lines were asked for up to twice and the requests
// cost more than the misses they hid at 512 tokens: 22 against 20 ns a row
// and head.) Where the tokens' spans follow one another (token-major over
// the item's heads, or one head of a head-major cache; in one page if
// paged), the slice is one span of lines (SliceSpan), which the integer
// kernels request as they go (HeadBlock); elsewhere PrefetchSlice requests
// it a token at a time.
HWY_INLINE PrefetchSpan SliceSpan(const RowSource& src, size_t row_bytes, int h0, int h1, int t0, int t1) {
  if (t0 >= t1) return {};
  if ((!src.blocks || (t0 >> src.shift) == ((t1 - 1) >> src.shift)) &&
      src.at(t0, h1 - 1) + row_bytes == src.at(t0, h0) + src.stride)
    return {src.at(t0, h0), src.at(t1 - 1, h1 - 1) + row_bytes};
  return {};
}

HWY_INLINE void PrefetchSlice(const RowSource& src, size_t row_bytes, int h0, int h1, int t0, int t1) {
  for (int t = t0; t < t1; ++t) {
    const uint8_t* a = src.at(t, h0);
    const uint8_t* e = src.at(t, h1 - 1) + row_bytes;
    for (; a < e; a += 64) __builtin_prefetch(a, 0, 2);
    __builtin_prefetch(e - 1, 0, 2);
  }
}

// Per-thread scratch of ScoresInt8 and ValuesInt8, kept across calls, in
// plain functions: a thread_local inside a template's instantiation is a
// unique global symbol, each use a guarded lookup (tq3 and tq4 +2-3 % a row
// when these were declared in ScoresInt8<KB> and ValuesInt8<KB>).
static std::vector<int32_t>& ScratchI32(int which) {
  thread_local std::vector<int32_t> v[3];
  return v[which];
}
static std::vector<float>& ScratchF32() {
  thread_local std::vector<float> v;
  return v;
}

// Scores of one block of tq rows from int8 codes and queries (score_int8.h):
// p[j][r] = s_r · qs_j · cs · (dot − 128 Σq8_j), or -inf when masked.
template <int KB>
void ScoresInt8(const RowReader& K, const Work& w, int h, int b0, int nb, int bs, float* p, PrefetchSpan pf) {
  const DF df;
  const DI di;
  const int N = Lanes();
  const int G = w.G, dp = K.dp;
  const uint8_t* rows[KB];
  alignas(64) float scale[KB];
  BlockRowPtrs(w.k, h, b0, nb, bs, rows);
  const auto neg_inf = hn::Set(df, kNegInf);
  // p[j][r] = score(r) · s_r for the rows (lo, hi) of this block that query j
  // sees, -inf elsewhere; score(r) gives the N rows from r on, before s_r.
  // The row scales are read by the first store, after whichever kernel ran
  // (BlockScales: its loads have brought the rows into L1).
  bool scaled = false;
  auto store = [&](int j, auto score) HWY_ATTR {
    if (!scaled) BlockScales<KB>(w.k, b0, nb, bs, rows, scale);
    scaled = true;
    float* pj = p + static_cast<size_t>(j) * KB;
    if (nb == bs && w.start[j] <= b0 && w.limit[j] >= b0 + bs) {  // every row visible (decode's blocks)
      for (int r = 0; r < bs; r += N) hn::StoreU(hn::Mul(score(r), hn::Load(df, scale + r)), df, pj + r);
      return;
    }
    const auto lo = hn::Set(di, std::max(w.start[j], b0) - b0 - 1);  // (rows > lo: 1.0.3 has no integer Ge)
    const auto hi = hn::Set(di, std::min(w.limit[j], b0 + nb) - b0);
    for (int r = 0; r < bs; r += N) {
      const auto idx = hn::Load(di, kRowIndex + r);
      const auto vis = hn::RebindMask(df, hn::And(hn::Gt(idx, lo), hn::Lt(idx, hi)));
      hn::StoreU(hn::IfThenElse(vis, hn::Mul(score(r), hn::Load(df, scale + r)), neg_inf), df, pj + r);
    }
  };
  const size_t hq = static_cast<size_t>(h) * 2 * G;  // this head's rows in q8, q8_scale, q8_bias
  if (K.i8.wide) {  // 16-bit words (score_int8.h): one dot a row and query, no offset
    std::vector<int32_t>& dots16_store = ScratchI32(0);
    if (dots16_store.size() < static_cast<size_t>(G) * KB) dots16_store.resize(static_cast<size_t>(G) * KB);
    int32_t* dots = dots16_store.data();
    PrefetchLines(pf).around(
        [&] { int8_dots16(K.i8, K.layout, rows, nb, w.q16 + static_cast<size_t>(h) * G * dp, G, dots, KB); });
    for (int j = 0; j < G; ++j) {
      const auto f = hn::Set(df, w.q8_scale[hq + j] * K.i8.cs16);
      const int32_t* dj = dots + static_cast<size_t>(j) * KB;
      store(j, [&](int r) HWY_ATTR { return hn::Mul(hn::ConvertTo(df, hn::LoadU(di, dj + r)), f); });
    }
    return;
  }
  // The residual bytes are G more query rows (score_int8.h).
  const int R = K.i8.residual ? 2 * G : G;
  std::vector<int32_t>& dots_store = ScratchI32(1);  // [R][KB], kept across calls
  if (dots_store.size() < static_cast<size_t>(R) * KB) dots_store.resize(static_cast<size_t>(R) * KB);
  int32_t* dots = dots_store.data();
  // With residual bytes, also the centroids' residual table against the
  // main query bytes (the codes unpacked once for both tables).
  std::vector<int32_t>& dots_c_store = ScratchI32(2);
  int32_t* dots_c = nullptr;
  if (K.i8.residual) {
    if (dots_c_store.size() < static_cast<size_t>(G) * KB) dots_c_store.resize(static_cast<size_t>(G) * KB);
    dots_c = dots_c_store.data();
  }
  if (K.i8.lut) {  // pair tables (never residual): sums of table bytes, scale sL in q8_scale
    PrefetchLines(pf).around(
        [&] { int8_lut_dots(K.i8, K.layout, rows, nb, w.lut + hq * int8_lut_bytes(dp), G, dots, KB); });
  } else if (K.i8_ordered) {  // (never residual)
    int8_dots_ordered(K.i8, K.layout, rows, nb, w.q8 + hq * dp, G, dots, KB, pf);
  } else {
    PrefetchLines(pf).around([&] {
      int8_dots2(K.i8, K.i8.residual ? &K.i8r : nullptr, K.layout, rows, nb, w.q8 + hq * dp, R, dots, G, dots_c,
                 KB);
    });
  }
  const float cs = K.i8.lut ? 1.0f : K.i8.cs;  // (the tables' sL holds the centroids' scale)
  for (int j = 0; j < G; ++j) {
    const auto f = hn::Set(df, w.q8_scale[hq + j] * cs);
    const auto bias = hn::Set(di, w.q8_bias[hq + j]);
    const int32_t* dj = dots + static_cast<size_t>(j) * KB;
    auto main = [&](int r) HWY_ATTR { return hn::Mul(hn::ConvertTo(df, hn::Sub(hn::LoadU(di, dj + r), bias)), f); };
    if (!K.i8.residual) {
      store(j, main);
      continue;
    }
    const auto fr = hn::Set(df, w.q8_scale[hq + G + j] * K.i8.cs);
    const auto bias_r = hn::Set(di, w.q8_bias[hq + G + j]);
    const auto fc = hn::Set(df, w.q8_scale[hq + j] * K.i8r.cs);
    const int32_t* dr = dots + static_cast<size_t>(G + j) * KB;
    const int32_t* dc = dots_c + static_cast<size_t>(j) * KB;
    store(j, [&](int r) HWY_ATTR {
      const auto b = hn::MulAdd(hn::ConvertTo(df, hn::Sub(hn::LoadU(di, dr + r), bias_r)), fr, main(r));
      return hn::MulAdd(hn::ConvertTo(df, hn::Sub(hn::LoadU(di, dc + r), bias)), fc, b);
    });
  }
}

// V accumulation of one block of tq rows on int8 (score_int8.h): the weights
// p[j][r] · s_r (0 for rows sparse V skips) as bytes per query, centroid
// bytes from the codes; acch in int8_values_order (V.perm, set by attention.cpp).
template <int KB>
void ValuesInt8(const RowReader& V, const Work& w, int h, int b0, int nb, int bs, const float* p, const bool* keep,
                float* acch, PrefetchSpan pf) {
  const DF df;
  const int N = Lanes();
  const int G = w.G;
  const uint8_t* rows[KB];
  alignas(64) float scale[KB];
  BlockRowPtrs(w.v, h, b0, nb, bs, rows);
  BlockScales<KB>(w.v, b0, nb, bs, rows, scale);
  if (w.sparse_v > 0.0f)  // (keep is all true otherwise)
    for (int i = 0; i < nb; ++i)
      if (!keep[i]) scale[i] = 0.0f;
  std::vector<float>& wts_store = ScratchF32();  // [G][KB]
  if (wts_store.size() < static_cast<size_t>(G) * KB) wts_store.resize(static_cast<size_t>(G) * KB);
  float* wts = wts_store.data();
  for (int j = 0; j < G; ++j)
    for (int r = 0; r < bs; r += N)
      hn::StoreU(hn::Mul(hn::LoadU(df, p + j * KB + r), hn::Load(df, scale + r)), df, wts + j * KB + r);
  if (w.v_drop_zero) {
    // Rows whose weight byte is 0 for every query add nothing to the
    // kernel's integer sums (int8_weights: w8 = fma(w, 255 / max, 1/2)
    // truncated, max over the block's rows): they are left out before the
    // kernel reads them, with the same result bit for bit (a row that holds
    // a query's max is never left out, so the maxima stay). A peaked softmax
    // (retrieval and previous-token heads, sparse V's zeros) leaves most rows
    // of most blocks out. A row stays unless w · 255 / max < 0.49, short of
    // the rounding boundary 0.5, so that a target's unfused multiply-add
    // cannot disagree with the kernel's fma.
    // The test costs a max per query and block; where one query's smallest
    // weight is above its bound every row stays, and the rest is skipped
    // (a flat softmax: the first query decides; the whole test was 5-8 % of
    // a synthetic 64K step when it ran to the end).
    using VF = hn::Vec<DF>;
    VF any[KB];  // (nv <= KB vectors, N >= 1)
    const int nv = bs / N;
    for (int v = 0; v < nv; ++v) any[v] = hn::Zero(df);
    bool all_live = false;
    for (int j = 0; j < G && !all_live; ++j) {
      const float* wj = wts + j * KB;
      auto vmax = hn::Zero(df), vmin = hn::LoadU(df, wj);
      for (int r = 0; r < bs; r += N) {
        const auto x = hn::LoadU(df, wj + r);
        vmax = hn::Max(vmax, x);
        vmin = hn::Min(vmin, x);
      }
      const float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
      if (!(mx > 0.0f)) continue;
      const float thr = mx * (0.49f / 255.0f);
      if (hn::GetLane(hn::MinOfLanes(df, vmin)) >= thr) all_live = true;  // (rows past nb weigh 0: never)
      const auto vt = hn::Set(df, thr);
      for (int v = 0; v < nv; ++v)
        any[v] = hn::Or(any[v], hn::VecFromMask(df, hn::Ge(hn::LoadU(df, wj + v * N), vt)));
    }
    // live[k]: rows 64k .. 64k + 63 (bit r % 64 for row r)
    uint64_t live[KB / 64];
    for (int k = 0; k < KB / 64; ++k) live[k] = ~uint64_t{0};
    if (!all_live) {
      for (int k = 0; k < KB / 64; ++k) live[k] = 0;
      for (int v = 0; v < nv; ++v) {
        uint8_t bits[8] = {};
        hn::StoreMaskBits(df, hn::MaskFromVec(any[v]), bits);
        uint64_t b = 0;
        std::memcpy(&b, bits, (static_cast<size_t>(N) + 7) / 8);
        live[v * N / 64] |= b << (v * N % 64);
      }
    }
    int n_live = 0;
    for (int k = 0; k < KB / 64; ++k) {
      const int lo = 64 * k;
      live[k] &= nb >= lo + 64 ? ~uint64_t{0} : nb <= lo ? 0 : (uint64_t{1} << (nb - lo)) - 1;
      n_live += __builtin_popcountll(live[k]);
    }
    if (n_live < nb) {
      *w.v_zero += static_cast<uint64_t>(nb - n_live);
      if (n_live == 0) return PrefetchLines(pf).rest();  // (the kernel would add nothing)
      int n2 = 0;
      for (int k = 0; k < KB / 64; ++k)
        for (uint64_t m = live[k]; m; m &= m - 1, ++n2) {
          const int r = 64 * k + __builtin_ctzll(m);
          rows[n2] = rows[r];
          for (int j = 0; j < G; ++j) wts[j * KB + n2] = wts[j * KB + r];
        }
      nb = n2;
    }
  }
  // acch in V.perm's order (the pair tables keep the byte kernel's order)
  if (V.i8.vlut) {
    if (w.v_lut) *w.v_lut += static_cast<uint64_t>(nb);
    return PrefetchLines(pf).around([&] { int8_vlut_values_ordered(V.i8, V.layout, rows, nb, wts, G, KB, acch); });
  }
  int8_values_ordered(V.i8, V.layout, rows, nb, wts, G, KB, acch, pf);
}

// e^x for x <= 0 (-inf included: 0), the integer path's softmax weights,
// which its V kernel rounds to bytes (2^-8) and the lane sums add in f32:
// 2^t with t = x log2(e) clamped at -127 (t below -126, x below -87.3:
// the result is 0), n = floor(t), 2^(t - n) by a degree-4 polynomial fitted
// to the relative error (at most 2.9e-6 on [0, 1), against hn::Exp's
// ~1e-7), times 2^n: n put into the exponent field (13 operations a vector
// against hn::Exp's ~22 and the -inf select), or on AVX-512 vscalefps.
template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const auto t = hn::Max(hn::Mul(x, hn::Set(d, 1.44269504088896341f)), hn::Set(d, -127.0f));
  const auto n = hn::Floor(t);
  const auto f = hn::Sub(t, n);
  auto p = hn::Set(d, 0.013426551100833566f);
  p = hn::MulAdd(p, f, hn::Set(d, 0.05224089699072618f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.24128268806092731f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.6930440082949276f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // p · 2^n by vscalefps, zero where n = -127 (as the exponent field gives
  // below; unmasked, a subnormal): two operations where the conversion of n
  // (with Highway's overflow fix-up, 5), the exponent's add and shift and
  // the multiply were 8. The same bits (p · 2^n >= 2^-126 is exact either
  // way; x NaN: t = -127, 0 either way).
  if constexpr (hn::MaxLanes(d) == 16)
    return V{_mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(n.raw, _mm512_set1_ps(-127.0f), _CMP_GT_OQ), p.raw, n.raw)};
#endif
  const auto two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::Mul(p, two_n);
}

// Scores, softmax update and V accumulation of one block of rows (nb <= bs)
// for the G queries of KV head h.
template <int KB>
void HeadBlock(const RowReader& K, const TurboConsts& ktc, const RowReader& V, const TurboConsts& vtc, const Work& w,
               int h, int b0, int nb, int bs, float* p, float* lvec,
               BlockRows& B, float* dec) {
  const DF df;
  const int N = Lanes();
  const int dp = K.dp, G = w.G;
  const float* qh = w.q + static_cast<size_t>(h) * G * dp;
  float* mh = w.m + (h - w.h0) * G;
  float* acch = w.acc + static_cast<size_t>(h - w.h0) * G * dp;
  // The integer paths' prefetch of the next block (this head's slice of
  // it). At 64 rows a block, one burst of K and V's lines (~130 at tq4, 8
  // heads) overran what the core keeps in flight and the scales' gathers
  // waited on memory (tq4 18.2 ns a row and head against 15.4 at 32 rows,
  // tq2 11.9; in four phases, K's halves around the scores and V's around
  // the values, 13.9-14.2 and 11.6-11.9). Where the slice is one span of
  // lines (token-major, or one head of a head-major cache), the kernels
  // request them as they go, a line or a few every lookup step of K's
  // kernel and every quad of V's rows (int8_dots_ordered,
  // int8_values_ordered): the phases' bursts of ~25 lines still stalled the
  // core on full miss queues (the prefetch instructions held ~40 % of
  // HeadBlock's samples at 64K). One thread, 64K, ns a row and head
  // (RESULTS §53): d 128 tq4 13.24 -> 12.04, tq3 12.77 -> 12.47 (12.00 on
  // 128-row blocks, which the bursts had made slower), tq2 10.22 -> 9.43;
  // d 256 (32K) -16 to -31 %.
  const int nh = w.h1 - w.h0, hi = h - w.h0;
  const int pt0 = std::min(b0 + bs + bs * hi / nh, w.r1), pt1 = std::min(b0 + bs + bs * (hi + 1) / nh, w.r1);
  const int ptm = pt0 + (pt1 - pt0) / 2;
  const bool pk = K.int8 && w.q8, pv = V.int8;
  const PrefetchSpan kspan = pk ? SliceSpan(w.k, K.row_bytes, w.h0, w.h1, pt0, pt1) : PrefetchSpan{};
  const PrefetchSpan vspan = pv ? SliceSpan(w.v, V.row_bytes, w.h0, w.h1, pt0, pt1) : PrefetchSpan{};
  const bool kphases = pk && !kspan.end, vphases = pv && !vspan.end;  // (in phases where not one span)
  if (kphases) PrefetchSlice(w.k, K.row_bytes, w.h0, w.h1, pt0, ptm);
  // ---- scores
  if (pk) {
    ScoresInt8<KB>(K, w, h, b0, nb, bs, p, kspan);
  } else if constexpr (KB == kBlock) {  // (the f32 path's p stride; 128-row blocks run on the integer path only)
    Kind kk = PrepareRows(K, ktc, w.k, h, w.k_end, b0, nb, w.r1, G, B, dec);
    ByKind<ScoresOp>(kk, K, ktc, B, nb, qh, G, w.limit, w.start, b0, p);
  }
  if (kphases) PrefetchSlice(w.k, K.row_bytes, w.h0, w.h1, ptm, pt1);
  // ---- online softmax per query over this block. The running max changes
  // only when a score exceeds it: that test is one compare per vector, and
  // the block's max is reduced only then (after the first blocks, rarely).
  // The sums stay vectors (lvec, N lanes per query), reduced once per item
  // in RunWork: the two lane reductions per query and block were a third of
  // the softmax's time on the integer path.
  // (The f32 path keeps its scalar sum per block, added to l in order: its
  // results are the same bits as before the vector sums, which moved a
  // random-router MXFP4 file's perplexity by 0.01 % of llama.cpp's.)
  const bool lane_sums = K.int8 && w.q8;
  float* lh = w.l + (h - w.h0) * G;
  const auto neg_inf = hn::Set(df, kNegInf);
  float* lvh = lane_sums ? lvec + static_cast<size_t>(h - w.h0) * G * N : nullptr;
  for (int j = 0; j < G; ++j) {
    float* pj = p + j * KB;
    for (int i = nb; i < bs; ++i) pj[i] = kNegInf;
    const auto vm_old = hn::Set(df, mh[j]);
    bool above = false;
    for (int i = 0; i < bs; i += N) above |= !hn::AllFalse(df, hn::Gt(hn::LoadU(df, pj + i), vm_old));
    if (above) {  // a score above the running max (the first finite score of a -inf max included)
      auto vmax = neg_inf;
      for (int i = 0; i < bs; i += N) vmax = hn::Max(vmax, hn::LoadU(df, pj + i));
      const float mnew = hn::GetLane(hn::MaxOfLanes(df, vmax));
      const float corr = std::exp(mh[j] - mnew);  // 0 when m was -inf
      const auto vc = hn::Set(df, corr);
      if (lane_sums) {
        float* lj = lvh + static_cast<size_t>(j) * N;
        hn::Store(hn::Mul(hn::Load(df, lj), vc), df, lj);
      } else {
        lh[j] *= corr;
      }
      float* aj = acch + static_cast<size_t>(j) * dp;
      for (int c = 0; c < dp; c += N) hn::Store(hn::Mul(hn::Load(df, aj + c), vc), df, aj + c);
      mh[j] = mnew;
    } else if (mh[j] == kNegInf) {  // nothing visible yet (every score so far -inf)
      for (int i = 0; i < bs; ++i) pj[i] = 0.0f;
      continue;
    }
    const auto vm = hn::Set(df, mh[j]);
    auto vsum = lane_sums ? hn::Load(df, lvh + static_cast<size_t>(j) * N) : hn::Zero(df);
    if (lane_sums) {  // the integer path: its V kernel rounds these weights to bytes
      for (int i = 0; i < bs; i += N) {
        const auto e = ExpNonPositive(df, hn::Sub(hn::LoadU(df, pj + i), vm));
        hn::StoreU(e, df, pj + i);
        vsum = hn::Add(vsum, e);
      }
    } else {
      for (int i = 0; i < bs; i += N) {
        const auto x = hn::LoadU(df, pj + i);
        const auto e = hn::IfThenZeroElse(hn::Eq(x, neg_inf), hn::Exp(df, hn::Sub(x, vm)));
        hn::StoreU(e, df, pj + i);
        vsum = hn::Add(vsum, e);
      }
    }
    if (lane_sums) {
      hn::Store(vsum, df, lvh + static_cast<size_t>(j) * N);
    } else {
      lh[j] += hn::GetLane(hn::SumOfLanes(df, vsum));
    }
  }
  if (vphases) PrefetchSlice(w.v, V.row_bytes, w.h0, w.h1, pt0, ptm);
  // ---- values (sparse V: skip rows no query gives weight >= threshold)
  bool keep[KB];
  if (w.sparse_v <= 0.0f) {
    std::memset(keep, 1, sizeof(keep));
  } else {
    for (int i = 0; i < nb; ++i) {
      bool k = false;
      for (int j = 0; j < G && !k; ++j) k = p[j * KB + i] >= w.sparse_v;
      if (!k) ++*w.skipped;
      keep[i] = k;
    }
  }
  if (V.int8) {
    ValuesInt8<KB>(V, w, h, b0, nb, bs, p, keep, acch, vspan);
  } else if constexpr (KB == kBlock) {
    Kind vk = PrepareRows(V, vtc, w.v, h, w.v_end, b0, nb, w.r1, G, B, dec);
    ByKind<AccumulateOp>(vk, V, vtc, B, nb, p, G, keep, acch);
  }
  if (vphases) PrefetchSlice(w.v, V.row_bytes, w.h0, w.h1, ptm, pt1);
}

void RunWork(const RowReader& K, const RowReader& V, const Work& w) {
  // tq reading constants, once per item rather than per block of rows.
  TurboConsts ktc, vtc;
  if (K.layout.kind == Kind::kTurbo && K.fast) MakeTurboConsts(K, ktc);
  if (V.layout.kind == Kind::kTurbo && V.fast) MakeTurboConsts(V, vtc);
  if (K.layout.kind == Kind::kTrellis && K.fast) MakeTrellisConsts(K, ktc.trellis);
  if (V.layout.kind == Kind::kTrellis && V.fast) MakeTrellisConsts(V, vtc.trellis);
  const int dp = K.dp, G = w.G;
  // Rows a block: where both K and V run on the integer path and V's kernel
  // takes 64 or more rows as one block, that many (64, tq2's 128), else 32.
  const int vrows = K.int8 && w.q8 && V.int8 ? std::min(int8_values_rows(V.i8), kBlockMax) : 0;
  const int bs = vrows >= 64 ? vrows : kBlockF32;
  // p[j][r]: softmax weights of the current block for query j (stride
  // kBlock, or 128 for 128-row blocks).
  float* p = static_cast<float*>(alloca(sizeof(float) * G * (bs > kBlock ? kBlockMax : kBlock)));
  // Per-thread scratch kept across calls: allocating it per item made the
  // allocator hand pages back and fault them in again on every decode step.
  thread_local std::unique_ptr<BlockRows> B_store;
  thread_local hwy::AlignedFreeUniquePtr<float[]> dec_store;
  if (!B_store) {
    B_store = std::make_unique<BlockRows>();
    dec_store = hwy::AllocateAligned<float>(static_cast<size_t>(kBlockF32) * (1024 + 16));
  }
  BlockRows* B = B_store.get();
  float* dec = dec_store.get();
  const int nh = w.h1 - w.h0;
  for (int j = 0; j < nh * G; ++j) { w.m[j] = -std::numeric_limits<float>::infinity(); w.l[j] = 0.0f; }
  std::memset(w.acc, 0, sizeof(float) * nh * G * dp);
  // The softmax sums as vectors of N lanes per (head, query): HeadBlock.
  const DF df;
  const size_t N = Lanes();
  thread_local hwy::AlignedFreeUniquePtr<float[]> lvec_store;
  thread_local size_t lvec_cap = 0;
  if (K.int8 && w.q8 && lvec_cap < nh * G * N) {
    lvec_store = hwy::AllocateAligned<float>(nh * G * N);
    lvec_cap = nh * G * N;
  }
  float* lvec = lvec_store.get();
  const bool lane_sums = K.int8 && w.q8;  // (the f32 path sums into l itself)
  if (lane_sums) std::memset(lvec, 0, sizeof(float) * nh * G * N);
  // The item's first block: each block requests the next one's lines as it
  // goes (HeadBlock), so the first is nobody's, and its rows came from
  // memory as the kernels reached them. Requested here at once, before the
  // first kernel's loads: tq3 at 64K (2 threads, 2048-row items) 3.35-3.46
  // -> 3.26-3.29 ms a step, on 8192-row items 3.15-3.22 -> 3.14-3.17
  // (RESULTS §54). Items of one head only: a token-major item's first block
  // is every head's (~800 lines of K at tq3, 8 heads), a burst that measured
  // no faster. One span of lines where the rows are (SliceSpan), each line
  // once; a token at a time across a page boundary.
  if (K.int8 && w.q8 && w.h1 - w.h0 == 1) {
    const int f1 = std::min(w.r0 + bs, w.r1);
    auto first = [&](const RowSource& src, size_t row_bytes) {
      if (const PrefetchSpan s = SliceSpan(src, row_bytes, w.h0, w.h1, w.r0, f1); s.end)
        PrefetchLines(s).rest();
      else
        PrefetchSlice(src, row_bytes, w.h0, w.h1, w.r0, f1);
    };
    first(w.k, K.row_bytes);
    if (V.int8) first(w.v, V.row_bytes);
  }
  auto blocks = [&](auto kb) HWY_ATTR {
    constexpr int KB = decltype(kb)::value;
    for (int b0 = w.r0; b0 < w.r1; b0 += bs) {
      const int nb = std::min(bs, w.r1 - b0);
      for (int h = w.h0; h < w.h1; ++h) HeadBlock<KB>(K, ktc, V, vtc, w, h, b0, nb, bs, p, lvec, *B, dec);
    }
  };
  if (bs > kBlock) blocks(std::integral_constant<int, kBlockMax>{});
  else blocks(std::integral_constant<int, kBlock>{});
  if (lane_sums)
    for (int j = 0; j < nh * G; ++j) w.l[j] = hn::GetLane(hn::SumOfLanes(df, hn::Load(df, lvec + j * N)));
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv::attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tkv::attn {
HWY_EXPORT(FastOk);
HWY_EXPORT(FillPerm);
HWY_EXPORT(RunWork);
void reader_perm(const RowLayout& layout, int dp, int* perm) { HWY_DYNAMIC_DISPATCH(FillPerm)(layout, dp, perm); }
bool reader_fast_ok(const RowLayout& layout, int d) { return HWY_DYNAMIC_DISPATCH(FastOk)(layout, d); }
void run_work(const RowReader& k, const RowReader& v, const Work& w) { HWY_DYNAMIC_DISPATCH(RunWork)(k, v, w); }
}  // namespace tkv::attn
#endif
