// attention/: attention over compressed rows — the fused kernels and their
// scalar reference. It sees util/ and codec/ only.
//
// Attention directly on compressed K/V rows (DESIGN.md 1.5). Rows are never
// rebuilt in the original domain: each query is rotated once into K's coding
// domain, scores come from codes and row scales, V is accumulated in V's
// coding domain and rotated back once per output row.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/format.h"
#include "util/status.h"

namespace tkv {

// One layer's cached rows: row (token t, kv head h) is at
// data + t * token_stride + h * head_stride. Token-major (llama.cpp's layout):
// head_stride = row_bytes, token_stride = n_kv_heads * row_bytes (the defaults).
// Head-major (each head's rows contiguous, best for streaming): token_stride =
// row_bytes, head_stride = capacity * row_bytes.
//
// Paged (a block pool, cache/block_pool.h): with `blocks`, token t lives in
// block blocks[t >> block_shift] at data + block * block_bytes, and the
// strides apply to t's position inside its block. The kernels read rows
// through the table in place: no copy, and the same arithmetic as on a
// contiguous cache (bit-identical results).
struct KvRows {
  const Codec* codec = nullptr;
  const uint8_t* data = nullptr;
  size_t token_stride = 0;  // bytes; 0 means n_kv_heads * row_bytes
  size_t head_stride = 0;   // bytes; 0 means row_bytes
  // Optional per-KV-head codecs ([n_kv_heads], calibrated formats: one basis
  // per head), all with codec's head dim and row size; codec is then heads[0].
  const Codec* const* heads = nullptr;
  const int32_t* blocks = nullptr;  // block table (paged), or null (contiguous)
  int block_shift = 0;              // log2(tokens per block)
  size_t block_bytes = 0;
  const uint8_t* end = nullptr;     // one past the readable bytes (paged; computed otherwise)
  const Codec* head(int h) const { return heads ? heads[h] : codec; }
  // Row (t, h), with the strides already resolved (see attention.cpp).
  const uint8_t* row(int t, int h, size_t ts, size_t hs) const {
    if (!blocks) return data + static_cast<size_t>(t) * ts + static_cast<size_t>(h) * hs;
    return data + static_cast<size_t>(blocks[t >> block_shift]) * block_bytes +
           static_cast<size_t>(t & ((1 << block_shift) - 1)) * ts + static_cast<size_t>(h) * hs;
  }
};

// How rows of tq/tqc formats are read (score_int8.h). kInt8: codes become
// centroid bytes by an in-register table lookup; K rows are dotted with the
// int8-quantized query and V rows accumulated with byte weights (AVX-512
// VBMI + VNNI, or AVX2: the same integers; CPUs without AVX2, other formats
// and tq/tqc layouts over the error budget keep kExact). kExact: every code decoded to f32. kDefault: the process
// default (set_key_scoring_default; TKV_KEYS=exact or int8 in the
// environment sets it at start; int8 otherwise).
enum class KeyScoring { kDefault, kExact, kInt8 };
void set_key_scoring_default(KeyScoring k);
KeyScoring key_scoring_default();
// Whether kInt8 would be used for rows of this codec on this CPU.
bool int8_keys_available(const Codec& codec);
// The kernels kInt8 runs on: "avx512" (VBMI + VNNI), "avx2" or "none" (kInt8
// then reads like kExact); by default the widest this CPU has
// (TKV_INT8_TARGET in the environment overrides). set_int8_kernels returns
// false, changing nothing, for a name this CPU cannot run.
std::string int8_kernels();
bool set_int8_kernels(const std::string& name);

struct AttnStats {
  uint64_t rows_scored = 0;   // K rows visited (per KV head, per query tile)
  uint64_t v_rows_skipped = 0;  // V rows skipped by sparse V
  uint64_t rows_scored_int8 = 0;  // of rows_scored, those scored on int8 (KeyScoring)
  uint64_t rows_scored_lut = 0;   // of those, scored by pair tables (tq2 on AVX2, up to 16 query tokens)
  uint64_t v_rows_int8 = 0;       // V rows accumulated on int8
  uint64_t v_rows_lut = 0;        // of those read, summed by V's pair tables (tq2 on AVX2, up to 16 query tokens)
  uint64_t v_rows_zero = 0;       // of those, rows every query's weight byte left at 0: not read
};

struct AttentionArgs {
  const float* q = nullptr;  // [n_q][n_q_heads][d]
  int n_q = 1;
  int n_q_heads = 1;
  int n_kv = 0;              // cached tokens
  int n_kv_heads = 1;        // n_q_heads must be a multiple
  int d = 0;
  KvRows k, v;
  // Causal mask: query i attends to cached tokens j <= causal_offset + i.
  // Negative means no mask (every query sees all n_kv tokens).
  int causal_offset = -1;
  // Sliding window (with a causal mask): query i sees only the last `window`
  // tokens, j > causal_offset + i - window (gemma3's local layers). 0: all.
  int window = 0;
  // Keys before this index are not seen (a range of the cache; protected
  // tokens split the keys into ranges read from different rows).
  int kv_begin = 0;
  // With a causal mask: query i sees keys < causal_offset + i + 1 - causal_lag
  // (the keys before a recent window, read from other rows).
  int causal_lag = 0;
  // Optional [n_q][n_q_heads]: the log of each output's softmax denominator,
  // in units of the scaled scores (-inf where nothing is visible), so that
  // outputs over disjoint key ranges can be merged exactly (merge_attention).
  float* lse = nullptr;
  float scale = 0.0f;        // softmax scale; 0 means 1/sqrt(d)
  // Attention sinks (gpt-oss): [n_q_heads] logits, in units of the scaled
  // scores, that join each query head's softmax denominator with no value:
  // out = Σ_j e^(s_j) v_j / (Σ_j e^(s_j) + e^(sink)). lse then includes the
  // sink's term. Null: none. Finite values only.
  const float* sinks = nullptr;
  // Exact mean centring: rows hold codes of (k - mu_k) and (v - mu_v);
  // [n_kv_heads][d] each, or null.
  const float* mu_k = nullptr;
  const float* mu_v = nullptr;
  int threads = 1;
  float sparse_v = 0.0f;     // skip V rows whose weight (relative to the max) is below this
  KeyScoring keys = KeyScoring::kDefault;  // the fast path's K scoring (attention_ref is exact)
  float* out = nullptr;      // [n_q][n_q_heads][d]
  AttnStats* stats = nullptr;
};

// Fast path: SIMD, threaded, fused on codes.
Status attention(const AttentionArgs& a);
// Scalar reference: dequantizes each row (original domain, + mu) and runs a
// plain two-pass softmax in double. Slow; kept for tests.
Status attention_ref(const AttentionArgs& a);
// Validates shapes and pointers (shared by both).
Status check_attention_args(const AttentionArgs& a);
// Merges attention outputs over disjoint key ranges into out: each part's
// weight is exp(lse_i - max lse); n rows of d ([n][d] outputs, [n] lse).
// Rows whose parts all saw nothing are zero.
void merge_attention(const float* const* outs, const float* const* lses, int parts, int n, int d, float* out);
// Attention sinks on finished rows: out (n rows of d, normalised over the
// keys) times e^L / (e^L + e^sink) with L the row's lse (updated to include
// the sink); sinks[r % n_heads] for row r. Rows with nothing visible stay 0.
void apply_attention_sinks(float* out, float* lse, const float* sinks, int n, int n_heads, int d);
// Attention over disjoint key ranges, one AttentionArgs each (same queries;
// their out and lse are set here), merged into out exactly; the first part's
// sinks, if any, are applied once, after the merge.
Status attention_merged(std::vector<AttentionArgs> parts, float* out);

}  // namespace tkv
