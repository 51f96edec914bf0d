// cache/: KV memory — layouts, the block pool, sequences, policies, cache
// files. It sees util/, codec/ and attention/'s row views; never model/.
//
// A sequence's KV cache: per layer, K and V rows in their own formats (chosen
// independently), in blocks of a BlockPool (cache/block_pool.h) listed in one
// block table, with optional exact mean centring (docs/ARCHITECTURE.md, "Mean
// centring"). A cache made on its own gets a private pool sized for its
// capacity; a server's sequences share one pool, and can share the blocks of
// a common prompt prefix.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "cache/block_pool.h"
#include "cache/kv_layout.h"
#include "codec/format.h"
#include "util/status.h"

namespace tkv {

class KvCache {
 public:
  // A cache with its own pool of ceil(capacity / block) blocks (blocks of
  // 256 tokens, fewer for a smaller capacity).
  static Expected<std::unique_ptr<KvCache>> create(const KvShape& shape, const KvCacheOptions& o);
  static Expected<std::unique_ptr<KvCache>> create(int n_layer, int n_kv_heads, int head_dim, const KvCacheOptions& o) {
    return create(KvShape(n_layer, n_kv_heads, head_dim), o);
  }
  // A sequence of at most `capacity` tokens in a shared pool; blocks are
  // taken as it grows (reserve()) and returned when it is destroyed. Its
  // sliding-window layers' ring (a few blocks, fixed) is its own.
  static Expected<std::unique_ptr<KvCache>> create_in(std::shared_ptr<BlockPool> pool, int capacity);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Stores n tokens at positions [pos, pos + n) of one layer; k and v are
  // [n][n_kv_heads][head_dim]. Positions must be written in order. Blocks
  // are taken from the pool as needed (fails when it has none left). A
  // sliding-window layer takes at most kWindowStep tokens a call.
  Status append(int layer, int pos, int n, const float* k, const float* v);
  // Attention of a's queries (q, n_q, heads, d, causal_offset, window,
  // scale, threads, out set by the caller) on one layer: the rows, means and
  // n_kv come from here. With protected tokens, three passes (the sinks and
  // the recent window at the protected width, the rest at the base width)
  // merged exactly (docs/ARCHITECTURE.md "Protected tokens").
  Status attend(int layer, AttentionArgs a) const;
  // One step of a layer: appends n rows at pos (k, v as for append) and runs
  // attention for the step's n queries (a as for attend, causal_offset pos).
  // A window layer whose means are fixed reads the W - 1 rows before the
  // step from its ring and the step's own rows from a scratch copy coded as
  // the ring codes them, merged, and appends after: its ring needs W rows.
  // A layer with protected recent tokens reads them the same way (rows before
  // the step copied from the ring before the append, the step's after it):
  // its ring needs protect_recent rows.
  Status attend_step(int layer, int pos, int n, const float* k, const float* v, AttentionArgs a);
  KvRows k_rows(int layer) const { return rows(layer, false); }
  KvRows v_rows(int layer) const { return rows(layer, true); }
  const float* mu_k(int layer) const { return seq_[layer].centred ? seq_[layer].mu_k.data() : nullptr; }
  const float* mu_v(int layer) const { return seq_[layer].centred ? seq_[layer].mu_v.data() : nullptr; }
  // True while a layer still holds its first rows in the f16 staging area.
  bool staging(int layer) const { return seq_[layer].staging; }
  // Bytes of the f16 staging area (all layers), freed once centring is fixed.
  size_t staging_bytes() const;

  int capacity() const { return capacity_; }
  // Bytes of `capacity` tokens' rows in these formats (what the cache costs
  // for its context; the pool rounds up to whole blocks); a sliding-window
  // layer counts its ring (KvLayout::ring_tokens).
  size_t k_bytes() const;
  size_t v_bytes() const;
  // Tokens whose rows a layer keeps: capacity, or its ring's.
  int layer_slots(int layer) const;
  // The recurrent state of a hybrid model's layers (KvShape::state_floats),
  // f32, zero for an empty sequence; the model reads and updates it.
  float* state(int i) { return state_[i].data(); }
  size_t state_bytes() const;
  bool has_state() const { return !state_.empty(); }
  // Averages over layers.
  double k_bits_per_value() const;
  double v_bits_per_value() const;
  // Tokens stored (the same in every layer once a forward pass is done).
  int n_tokens() const { return seq_.empty() ? 0 : seq_[0].written; }
  // Tokens stored in one layer (append fills the layers one at a time).
  int layer_tokens(int layer) const { return seq_[layer].written; }
  // How many rows fix the means of a centred cache (0 when the means do not
  // come from the rows: no mean centring, no tq format, or a policy's means).
  int mean_rows() const { return layout_->mean_rows(); }
  // The longest prefix of at most n stored tokens that truncate() can keep:
  // n itself, unless the means were fixed from rows beyond it, a window
  // layer's ring has overwritten rows its last tokens see, or a recurrent
  // state has moved past it (then 0).
  int keepable_prefix(int n) const;
  // Drops every token from position n on (n <= n_tokens(), n == keepable_prefix(n)).
  Status truncate(int n);

  // ---- paging
  BlockPool& pool() { return *pool_; }
  const BlockPool& pool() const { return *pool_; }
  const std::vector<int32_t>& block_table() const { return table_; }
  // Blocks a sequence of n tokens needs.
  int blocks_for(int n) const { return (n + pool_->block_tokens() - 1) >> pool_->block_shift(); }
  // Takes the blocks for positions < n now (admission control); fails, taking
  // none, when the pool cannot supply them.
  Status reserve(int n);
  // On an empty sequence: shares the longest run of published blocks that
  // hold tokens[0, k * block) for k whole blocks, at most max_tokens tokens;
  // returns the tokens now cached (0 when none matched).
  // (Never for a cache with window layers or recurrent state: their rows and
  // state are not a function of one block's tokens; returns 0.)
  // count: false for a probe that is not a share attempt (metrics).
  int share_prefix(const int32_t* tokens, int max_tokens, bool count = true);
  // Whether this sequence's rows are a function of its blocks' tokens alone
  // (no window rings, recurrent state or protected rows): only then can its
  // blocks be shared, published, stored elsewhere or adopted.
  bool shareable() const { return ring_.empty() && state_.empty() && !hi_pool_; }
  // Appends block b (allocated from pool() by the caller, which filled its
  // rows with those of the next block_tokens tokens and hands its reference
  // over) to a sequence that ends at a block boundary: a block of another
  // sequence's rows, e.g. from the shared store (kvstore/). The first block
  // brings the sequence's means (`m`, per layer, empty when not centred);
  // later blocks must have been centred with the means this sequence holds
  // (the caller checks means_key(means())). The caller releases b on error.
  Status adopt_block(int32_t b, const SequenceMeans* m);
  // The sequence's means (per layer; empty vectors for a layer not centred).
  std::shared_ptr<const SequenceMeans> means() const;
  // Publishes every full block of tokens[0, n_tokens()) (the tokens this
  // cache holds) so later sequences can share them.
  void publish(const int32_t* tokens);

  // The format names of one layer.
  const std::string& type_k(int layer) const { return layout_->layer(layer).kc[0]->name(); }
  const std::string& type_v(int layer) const { return layout_->layer(layer).vc[0]->name(); }
  const KvCacheOptions& options() const { return layout_->options(); }
  const KvLayout& layout() const { return *layout_; }
  int n_layer() const { return layout_->n_layer(); }
  int n_kv_heads() const { return layout_->n_kv_heads(); }
  int head_dim() const { return layout_->head_dim(); }
  // Non-finite rows (docs/ARCHITECTURE.md, "Non-finite values"): a K or V
  // row with NaN or Inf is stored as zeros (its key then scores 0, its value
  // adds nothing) so that it cannot poison the means, the other rows or the
  // attention output of other tokens; append() counts them and prints one
  // warning per cache naming the first (layer, head, position).
  struct NonFinite {
    int64_t rows = 0;  // K and V rows zeroed so far
    int layer = -1, head = -1, pos = -1;
    bool v = false;    // the first was a V row
  };
  const NonFinite& nonfinite() const { return nonfinite_; }
  // Row (t, h) of a layer's K or V (not while staging).
  uint8_t* k_row(int layer, int t, int h) { return row(layer, t, h, false); }
  uint8_t* v_row(int layer, int t, int h) { return row(layer, t, h, true); }

 private:
  friend class CacheFileLoader;  // cache/cache_file.cpp restores rows in place
  KvCache() = default;
  struct Seq {  // one layer's state for this sequence
    std::vector<float> mu_k, mu_v;
    bool centred = false;
    bool staging = false;
    std::vector<uint8_t> sk, sv;  // f16 rows while staging, head-major with capacity mean_rows
    int written = 0;
  };
  KvRows rows(int layer, bool v) const;
  KvRows stored_rows(int layer, bool v) const;
  uint8_t* row(int layer, int t, int h, bool v);
  Status quantize_rows(int layer, int pos, int n, const float* k, const float* v);
  void fix_mean(Seq& S, int n, const float* k, const float* v);
  Status own_block(int index);  // copy-on-write before writing into a shared block
  const float* zero_nonfinite(int layer, int pos, int n, const float* x, bool v, std::vector<float>& copy);
  std::shared_ptr<const KvLayout> layout_;
  std::shared_ptr<BlockPool> pool_;
  int capacity_ = 0;
  std::vector<int32_t> table_;
  // Window layers: the ring's blocks (its own pool) and, per logical block
  // of kRingBlock tokens, the ring block that holds it (ring_[j % size]).
  std::shared_ptr<BlockPool> ring_pool_;
  std::vector<int32_t> ring_, ring_view_;
  // Protected tokens: the sinks' blocks and the recent ring's view table, in
  // a pool of the protected layout (blocks of kRingBlock tokens).
  std::shared_ptr<BlockPool> hi_pool_;
  std::vector<int32_t> hi_sinks_, hi_view_;
  KvRows protected_rows(int layer, bool v, bool sinks) const;
  Status attend_protected(int layer, const AttentionArgs& a, const AttentionArgs* recent) const;
  Status attend_step_protected(int layer, int pos, int n, const float* k, const float* v, AttentionArgs a);
  size_t side_bytes(bool v) const;
  double side_bits(bool v) const;
  uint8_t* hi_row(int layer, int t, int h, bool v, bool sink);
  std::vector<std::vector<float>> state_;
  std::vector<Seq> seq_;
  NonFinite nonfinite_;
};

}  // namespace tkv
