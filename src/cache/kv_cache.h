// The KV cache: per layer, K and V rows in their own formats (chosen
// independently), head-major (each head's rows contiguous), with optional
// exact mean centring (DESIGN.md 1.4). Its memory is exactly what the codecs'
// row sizes say.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "codec/format.h"
#include "util/huge_buffer.h"
#include "util/status.h"

namespace tkv {

struct KvCacheOptions {
  std::string type_k = "tq4";
  std::string type_v = "tq4";
  int capacity = 4096;         // tokens
  // Mean centring for tq formats (DESIGN.md 1.4): the first rows of a
  // sequence are kept in f16 until `mean_tokens` have been seen (or the first
  // batch is at least that long); then mu per (layer, KV head) is fixed from
  // them and they are quantized, centred, like every later row.
  bool mean_center = true;
  int mean_tokens = 64;
  uint64_t seed = kDefaultSeed;
};

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
  size_t k_bytes() const { return k_codec_->row_bytes() * size_t(n_kv_heads_) * opt_.capacity * layers_.size(); }
  size_t v_bytes() const { return v_codec_->row_bytes() * size_t(n_kv_heads_) * opt_.capacity * layers_.size(); }
  double k_bits_per_value() const { return k_codec_->bits_per_value(); }
  double v_bits_per_value() const { return v_codec_->bits_per_value(); }
  const KvCacheOptions& options() const { return opt_; }

 private:
  struct Layer {
    HugeBuffer k, v;
    std::vector<float> mu_k, mu_v;
    bool centred = false;
    bool staging = false;
    std::vector<uint8_t> sk, sv;  // f16 rows while staging, head-major with capacity mean_tokens
    int written = 0;
  };
  Status quantize_rows(Layer& L, int layer, int pos, int n, const float* k, const float* v);
  void fix_mean(Layer& L, int n, const float* k, const float* v);
  KvCacheOptions opt_;
  int n_kv_heads_ = 0, d_ = 0;
  std::unique_ptr<Codec> k_codec_, v_codec_;
  std::unique_ptr<Codec> f16_;  // staging format
  std::vector<Layer> layers_;
};

}  // namespace tkv
