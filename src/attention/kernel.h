// Internal interface between the attention driver (attention.cpp) and the
// SIMD kernel (attention_simd.cpp). Not part of the public API.
#pragma once
#include <cstddef>
#include <cstdint>

#include "attention/score_int8.h"
#include "codec/format.h"

namespace tkv::attn {

constexpr int kMaxTable = 256 + 16;

// A row reader prepared once per call: how to turn a row into floats in the
// codec's coding domain, natural coordinate order, padded to dp with zeros.
struct RowReader {
  const Codec* codec = nullptr;
  RowLayout layout;
  int d = 0, dp = 0;
  bool fast = false;        // SIMD decoder usable for this layout and vector width
  bool gaps = false;        // tq layouts whose parts leave positions < dp out (they decode to 0)
  size_t row_bytes = 0;
  float tables[RowLayout::kMaxParts][kMaxTable];  // tq centroid tables, zero-padded (for lane lookups)
  int perm[1024 + 16];      // SIMD decoders emit coordinate perm[pos] at position pos
  // K only: scores from int8 codes and queries (score_int8.h) when int8 is set.
  bool int8 = false;
  bool i8_ordered = false;  // K: the queries go to the kernels in int8_query_order (i8.lanes_dots)
  int i8_order[1024];       // that order: position p holds coordinate i8_order[p]
  Int8Keys i8;
  Int8Keys i8r;  // i8's residual centroid table (K, where i8.residual)
};

// Where row (t, h) of one layer's K or V lives: base + t * stride + h *
// hstride, or paged (blocks != null): t's block in the table, then the
// strides inside the block (KvRows in attention.h).
struct RowSource {
  const uint8_t* base = nullptr;
  size_t stride = 0, hstride = 0;
  const int32_t* blocks = nullptr;
  int shift = 0;
  size_t block_bytes = 0;
  const uint8_t* at(int t, int h) const {
    if (!blocks) return base + static_cast<size_t>(t) * stride + static_cast<size_t>(h) * hstride;
    return base + static_cast<size_t>(blocks[t >> shift]) * block_bytes +
           static_cast<size_t>(t & ((1 << shift) - 1)) * stride + static_cast<size_t>(h) * hstride;
  }
};

// One unit of work: tokens [r0, r1) of every KV head, for the G query vectors
// of each head's group (already in K's domain and scaled); query j sees rows
// in [start[j], limit[j]). Blocks of tokens are streamed once, all heads per block, so the
// cache is read sequentially.
struct Work {
  const float* q;           // [H][G][dp] (all heads; the item reads h0..h1)
  const int* limit;         // [G]
  const int* start;         // [G]
  int G;                    // queries per head
  int h0, h1;               // heads this item computes
  int r0, r1;
  RowSource k, v;           // where row (t, h) of K / V is
  const uint8_t* k_end;     // one past the last readable byte of K / V data
  const uint8_t* v_end;
  float sparse_v;
  // K read by the integer path (K.int8): the queries as int8 [H][2G][dp] in
  // natural coordinate order, or in int8_query_order where K.i8_ordered
  // (rows G..2G-1: the residual bytes, where K.i8.residual), their scales
  // and biases 128·Σq8 [H][2G].
  const int8_t* q8 = nullptr;
  const float* q8_scale = nullptr;
  const int32_t* q8_bias = nullptr;
  // K.i8.wide: the queries as 16-bit words [H][G][dp] (natural order); their
  // scales in q8_scale at the int8 rows' places.
  const int16_t* q16 = nullptr;
  // K.i8.lut: the pair tables [H][2G][int8_lut_bytes(dp)] at the int8 rows'
  // places, their scales sL and biases in q8_scale and q8_bias.
  const uint8_t* lut = nullptr;
  // Outputs: running max, sum and accumulator (V's domain) per head and query.
  float* m;                 // [h1 - h0][G]
  float* l;                 // [h1 - h0][G]
  float* acc;               // [h1 - h0][G][dp]
  uint64_t* skipped;
  // V rows of the integer path whose weight byte is 0 for every query, left
  // out before the kernel reads them (ValuesInt8); counted in *v_zero
  // (AttnStats::v_rows_zero; sparse V's skipped rows are among them).
  bool v_drop_zero = false;  // (attention.cpp sets it, with v_zero)
  uint64_t* v_zero = nullptr;
  uint64_t* v_lut = nullptr;  // rows V's pair tables summed (AttnStats::v_rows_lut), where non-null
};

// Whether ValuesInt8 leaves out rows whose weight bytes are all 0 (default
// on; the results are the same bits either way, which tests check by
// turning it off).
void set_v_drop_zero(bool on);
bool v_drop_zero();

// Lanes of the dispatched target and whether its decoders handle this layout.
bool reader_fast_ok(const RowLayout& layout, int d);
void run_work(const RowReader& k, const RowReader& v, const Work& w);
// The decode order of the dispatched target's fast decoder (identity otherwise).
void reader_perm(const RowLayout& layout, int dp, int* perm);

}  // namespace tkv::attn
