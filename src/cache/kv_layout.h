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
};

// Named per-layer plain formats for users who do not calibrate (README):
// "quality", "balanced", "compact". Fails on another name.
Status apply_kv_preset(const std::string& preset, int n_layer, KvCacheOptions& o);
// The per-layer choice every cache builder offers: a policy file (read and,
// with model != 0, checked to be that model's) or a preset; neither leaves o
// as it is, both is an error.
Status apply_kv_policy_or_preset(const std::string& policy_path, const std::string& preset, int n_layer,
                                 uint64_t model, KvCacheOptions& o);

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
  static Expected<std::shared_ptr<const KvLayout>> create(int n_layer, int n_kv_heads, int head_dim,
                                                          const KvCacheOptions& o);
  int n_layer() const { return static_cast<int>(layers_.size()); }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return d_; }
  const LayerCodecs& layer(int l) const { return layers_[l]; }
  const KvCacheOptions& options() const { return opt_; }
  const Codec& f16() const { return *f16_; }  // the staging format
  int mean_rows() const;                      // the largest over layers
  // K and V rows of every layer and KV head for one token.
  size_t bytes_per_token() const;
  // Rows made under one layout are valid under the other: same shape,
  // formats, seed, policy and mean rows.
  bool compatible(const KvLayout& o) const;

 private:
  KvCacheOptions opt_;
  int n_kv_heads_ = 0, d_ = 0;
  std::unique_ptr<Codec> f16_;
  std::vector<LayerCodecs> layers_;
};

}  // namespace tkv
