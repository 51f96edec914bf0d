// The KV cache: per layer, K and V rows in their own formats (chosen
// independently), head-major (each head's rows contiguous), with optional
// exact mean centring (DESIGN.md 1.4). Its memory is exactly what the codecs'
// row sizes say.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "cache/kv_policy.h"
#include "codec/format.h"
#include "util/huge_buffer.h"
#include "util/status.h"

namespace tkv {

struct KvCacheOptions {
  std::string type_k = "tq4";
  std::string type_v = "tq4";
  int capacity = 4096;         // tokens
  // Mean centring for tq formats (DESIGN.md 1.4): the first rows of a
  // sequence are kept in f16 until `mean_tokens` have been seen (at once when
  // the first batch is that long); then mu per (layer, KV head) is fixed from
  // exactly the first mean_tokens rows (min(mean_tokens, capacity)) and every
  // row is quantized, centred. Using exactly those rows, not a longer first
  // batch, makes every stored row a function of the tokens up to it and the
  // first mean_tokens only: a cache cut back to a prefix of at least
  // mean_tokens rows equals the cache that prefix alone would have made
  // (prompt caches, shared prefixes), bit for bit.
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

class KvCache {
 public:
  static Expected<std::unique_ptr<KvCache>> create(int n_layer, int n_kv_heads, int head_dim, const KvCacheOptions& o);

  // Stores n tokens at positions [pos, pos + n) of one layer; k and v are
  // [n][n_kv_heads][head_dim]. Positions must be written in order.
  Status append(int layer, int pos, int n, const float* k, const float* v);
  KvRows k_rows(int layer) const;
  KvRows v_rows(int layer) const;
  const float* mu_k(int layer) const { return layers_[layer].centred ? layers_[layer].mu_k.data() : nullptr; }
  const float* mu_v(int layer) const { return layers_[layer].centred ? layers_[layer].mu_v.data() : nullptr; }
  // True while a layer still holds its first rows in the f16 staging area.
  bool staging(int layer) const { return layers_[layer].staging; }
  // Bytes of the f16 staging area (all layers), freed once centring is fixed.
  size_t staging_bytes() const;

  int capacity() const { return opt_.capacity; }
  size_t k_bytes() const;
  size_t v_bytes() const;
  // Averages over layers.
  double k_bits_per_value() const;
  double v_bits_per_value() const;
  // Tokens stored (the same in every layer once a forward pass is done).
  int n_tokens() const { return layers_.empty() ? 0 : layers_[0].written; }
  // How many rows fix the means of a centred cache (0 when the means do not
  // come from the rows: no mean centring, no tq format, or a policy's means).
  int mean_rows() const;
  // The longest prefix of at most n stored tokens that truncate() can keep:
  // n itself, unless the means were fixed from rows beyond it (then 0).
  int keepable_prefix(int n) const;
  // Drops every token from position n on (n <= n_tokens(), n == keepable_prefix(n)).
  Status truncate(int n);

  // The format names of one layer.
  const std::string& type_k(int layer) const { return layers_[layer].kc[0]->name(); }
  const std::string& type_v(int layer) const { return layers_[layer].vc[0]->name(); }
  const KvCacheOptions& options() const { return opt_; }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return d_; }

 private:
  friend class CacheFileLoader;  // cache/cache_file.cpp restores rows in place
  struct Layer {
    // One codec for all heads, or one per KV head (calibrated formats).
    std::vector<std::shared_ptr<const Codec>> kc, vc;
    std::vector<const Codec*> kp, vp;
    const Codec* k_codec(int h) const { return kp[kp.size() == 1 ? 0 : h]; }
    const Codec* v_codec(int h) const { return vp[vp.size() == 1 ? 0 : h]; }
    HugeBuffer k, v;
    std::vector<float> mu_k, mu_v;
    bool centred = false;
    bool staging = false;
    std::vector<uint8_t> sk, sv;  // f16 rows while staging, head-major with capacity mean_tokens
    int written = 0;
  };
  int mean_rows(const Layer& L) const;
  Status quantize_rows(Layer& L, int layer, int pos, int n, const float* k, const float* v);
  void fix_mean(Layer& L, int n, const float* k, const float* v);
  KvCacheOptions opt_;
  int n_kv_heads_ = 0, d_ = 0;
  std::unique_ptr<Codec> f16_;  // staging format
  std::vector<Layer> layers_;
};

}  // namespace tkv
