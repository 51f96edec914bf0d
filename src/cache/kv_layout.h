// What a KV cache holds per layer, fixed before any row is stored: the K and V
// formats (one codec, or one per KV head for calibrated formats), their row
// sizes and how many rows fix the means. One immutable layout is shared by a
// block pool and every sequence whose rows live in it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_policy.h"
#include "codec/format.h"
#include "util/status.h"

namespace tkv {

struct KvCacheOptions {
  std::string type_k = "tq4";
  std::string type_v = "tq4";
  int capacity = 4096;         // tokens
  // Mean centring for tq formats (docs/ARCHITECTURE.md, "Mean centring"): the
  // first rows of a sequence are kept in f16 until `mean_tokens` have been
  // seen (at once when the first batch is that long); then mu per (layer, KV
  // head) is fixed from exactly the first mean_tokens rows
  // (min(mean_tokens, capacity)) and every row is quantized, centred. Using
  // exactly those rows, not a longer first batch, makes every stored row a
  // function of the tokens up to it and the first mean_tokens only: a cache
  // cut back to a prefix of at least mean_tokens rows equals the cache that
  // prefix alone would have made (prompt caches, shared prefixes), bit for bit.
  bool mean_center = true;
  int mean_tokens = 64;
  uint64_t seed = kDefaultSeed;
  // Per-layer formats (a preset): when non-empty, one entry per layer,
  // overriding type_k / type_v.
  std::vector<std::string> layer_type_k, layer_type_v;
  // A calibrated policy (turbokv calibrate): formats per layer, tqc bases per
  // KV head, and the means, which are then used from the first token (no
  // staging). Overrides every type above.
  std::shared_ptr<const KvPolicy> policy;
  // Protected tokens (docs/ARCHITECTURE.md "Protected tokens"): the first
  // protect_sinks tokens, and for each query its last protect_recent tokens,
  // are read at protect_type's width from rows kept besides the base rows
  // (the sinks, and a ring of the recent ones); every token also has its
  // base-width row, read once it has left the recent window. Full-attention
  // layers only. 0 and 0: none.
  int protect_sinks = 0, protect_recent = 0;
  std::string protect_type = "q8_0";
};

// Named per-layer plain formats for users who do not calibrate (README):
// "quality", "balanced", "compact", "tiny" (2-2.5 bits with protected recent
// tokens), "tiny-e8" (tiny's protection over E8 lattice rows). Fails on
// another name.
Status apply_kv_preset(const std::string& preset, int n_layer, KvCacheOptions& o);
// The per-layer choice every cache builder offers: a policy file (read and,
// with model != 0, checked to be that model's) or a preset; neither leaves o
// as it is, both is an error.
Status apply_kv_policy_or_preset(const std::string& policy_path, const std::string& preset, int n_layer,
                                 uint64_t model, KvCacheOptions& o);

// The most tokens one append writes to a sliding-window layer (the model
// feeds a longer prompt to its window layers in steps of this size;
// docs/ARCHITECTURE.md "Sliding-window layers").
constexpr int kWindowStep = 64;
constexpr int kRingBlock = 32;  // tokens per block of a ring
// The most tokens one append writes to a layer with protected recent tokens:
// a step's queries read their own rows from a copy, so the ring holds
// protect_recent rows (KvCache::attend_step). Smaller than a
// window layer's step because the ring is extra memory at the protected
// width, counted against the short contexts' bits per value (RESULTS §17).
constexpr int kProtectStep = 16;

// What a model's cache must hold, fixed by its architecture: the layers that
// have a KV cache (a hybrid model's recurrent layers have none; they are not
// counted), their KV heads and head dim, each layer's sliding window and the
// recurrent state a sequence carries besides its rows.
struct KvShape {
  int n_layer = 0, n_kv_heads = 0, head_dim = 0;
  // Per layer: 0 keeps every token; W > 0 keeps only the last W (a ring of
  // blocks, docs/ARCHITECTURE.md "Sliding-window layers"). Empty: all 0.
  std::vector<int> window;
  // f32 values of recurrent state per sequence (Gated DeltaNet layers'
  // convolution and delta-rule states), one entry per recurrent layer.
  std::vector<size_t> state_floats;
  KvShape() = default;
  KvShape(int layers, int kv_heads, int dim) : n_layer(layers), n_kv_heads(kv_heads), head_dim(dim) {}
  int window_of(int l) const { return window.empty() ? 0 : window[l]; }
};

struct LayerCodecs {
  // One codec for all heads, or one per KV head (calibrated formats).
  std::vector<std::shared_ptr<const Codec>> kc, vc;
  std::vector<const Codec*> kp, vp;
  size_t k_row = 0, v_row = 0;  // bytes of one row (every head's codec has the same)
  int mean_rows = 0;            // rows that fix the means: 0 without row means (no tq format, no centring, a policy)
  const Codec* k_codec(int h) const { return kp[kp.size() == 1 ? 0 : h]; }
  const Codec* v_codec(int h) const { return vp[vp.size() == 1 ? 0 : h]; }
};

class KvLayout {
 public:
  // capacity (the options') bounds mean_rows: a context shorter than
  // mean_tokens is centred over all of it.
  static Expected<std::shared_ptr<const KvLayout>> create(const KvShape& shape, const KvCacheOptions& o);
  static Expected<std::shared_ptr<const KvLayout>> create(int n_layer, int n_kv_heads, int head_dim,
                                                          const KvCacheOptions& o) {
    return create(KvShape(n_layer, n_kv_heads, head_dim), o);
  }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  const KvShape& shape() const { return shape_; }
  int window(int l) const { return shape_.window_of(l); }
  // The protected rows' codecs (every layer in protect_type), or null.
  const KvLayout* protected_layout() const { return hi_.get(); }
  const std::shared_ptr<const KvLayout>& protected_layout_ptr() const { return hi_; }
  bool protects(int l) const { return hi_ && window(l) == 0; }
  // The most tokens one append may write to layer l (a ring's step), or 0: any.
  int append_step(int l) const;
  // Tokens the protected-recent ring holds (protect_recent,
  // rounded up to ring blocks); 0 without protection.
  int protect_ring_tokens() const;
  bool has_windows() const;
  // Tokens a window layer's ring holds: its window rounded up to ring blocks,
  // or more while a centred cache stages (its mean rows plus a step). 0 for a
  // full layer.
  int ring_tokens(int l) const;
  // The ring a sequence keeps for all its window layers: the largest of theirs.
  int max_ring_tokens() const;
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return d_; }
  const LayerCodecs& layer(int l) const { return layers_[l]; }
  const KvCacheOptions& options() const { return opt_; }
  const Codec& f16() const { return *f16_; }  // the staging format
  int mean_rows() const;                      // the largest over layers
  // K and V rows of every KV head for one token, in the full layers (what a
  // pool block holds per token) or in the window layers (a ring's).
  size_t bytes_per_token(bool window_layers = false) const;
  // Rows made under one layout are valid under the other: same shape,
  // formats, seed, policy and mean rows.
  bool compatible(const KvLayout& o) const;

 private:
  KvCacheOptions opt_;
  KvShape shape_;
  int n_kv_heads_ = 0, d_ = 0;
  std::unique_ptr<Codec> f16_;
  std::vector<LayerCodecs> layers_;
  std::shared_ptr<const KvLayout> hi_;
};

}  // namespace tkv
