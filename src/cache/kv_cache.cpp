#include "cache/kv_cache.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

namespace tkv {

namespace {

using Codecs = std::vector<std::shared_ptr<const Codec>>;

// The codecs of one layer's K or V: a calibrated format gets one per KV head.
Status make_layer_codecs(const std::string& name, const KvPolicyEntry* cal, int H, int d, uint64_t seed, Codecs& out) {
  if (is_calibrated_format(name)) {
    if (!cal) return Status::Error(name + " needs a calibration: pass --kv-policy FILE from `turbokv calibrate`");
    for (int h = 0; h < H; ++h) {
      auto c = make_calibrated_codec(name, cal->heads[h]);
      if (!c) return c.status();
      out.push_back(std::move(*c));
    }
    return Status::Ok();
  }
  auto c = make_codec(name, d, seed);
  if (!c) return c.status();
  out.push_back(std::move(*c));
  return Status::Ok();
}

// Calibrated codecs cost O(d^3) each to build (basis check, run mixing), and
// tools build a cache per chunk or trial: they are kept per live policy
// object (a policy is immutable behind its shared_ptr; a dead one's entry is
// dropped, so a reused address is never mistaken for it).
struct PolicyCodecs {
  std::weak_ptr<const KvPolicy> owner;
  std::vector<Codecs> k, v;  // per layer
};
std::mutex g_policy_mu;
std::map<const KvPolicy*, PolicyCodecs> g_policy_codecs;

Status policy_layer_codecs(const std::shared_ptr<const KvPolicy>& pol, int l, bool is_v, int H, int d, uint64_t seed,
                           Codecs& out) {
  const KvPolicyEntry& e = is_v ? pol->v[l] : pol->k[l];
  if (!is_calibrated_format(e.format)) return make_layer_codecs(e.format, &e, H, d, seed, out);
  std::lock_guard<std::mutex> lock(g_policy_mu);
  for (auto it = g_policy_codecs.begin(); it != g_policy_codecs.end();)
    it = it->second.owner.expired() ? g_policy_codecs.erase(it) : std::next(it);
  PolicyCodecs& pc = g_policy_codecs[pol.get()];
  if (pc.owner.lock() != pol) pc = PolicyCodecs{pol, std::vector<Codecs>(pol->n_layer), std::vector<Codecs>(pol->n_layer)};
  Codecs& cached = is_v ? pc.v[l] : pc.k[l];
  if (cached.empty()) {
    Status s = make_layer_codecs(e.format, &e, H, d, seed, cached);
    if (!s.ok()) {
      cached.clear();
      return s;
    }
  }
  out = cached;
  return Status::Ok();
}

}  // namespace

Status apply_kv_preset(const std::string& preset, int n_layer, KvCacheOptions& o) {
  // Plain formats with the -ip norm (the lowest KLD per bit among plain
  // formats on ref-5m, RESULTS §6); K one half-bit step above V (score errors
  // are amplified by the softmax: tq4.5-ip/tq4-ip beat tq4-ip/tq4.5-ip's
  // mirror image on ref-5m); the first and last layers one step wider still,
  // a cheap insurance (2 layers of n) against the layers that were the most
  // sensitive in calibrate's per-layer measurements (the last ones on ref-5m).
  std::string k_mid, v_mid, k_edge, v_edge;
  if (preset == "quality") {
    k_mid = "tq5-ip"; v_mid = "tq4.5-ip"; k_edge = "tq6-ip"; v_edge = "tq5-ip";
  } else if (preset == "balanced") {
    k_mid = "tq4.5-ip"; v_mid = "tq4-ip"; k_edge = "tq5-ip"; v_edge = "tq4.5-ip";
  } else if (preset == "compact") {
    k_mid = "tq3.5-ip"; v_mid = "tq3-ip"; k_edge = "tq4-ip"; v_edge = "tq3.5-ip";
  } else {
    return Status::Error("unknown --kv-preset '" + preset + "' (quality, balanced or compact)");
  }
  o.layer_type_k.assign(n_layer, k_mid);
  o.layer_type_v.assign(n_layer, v_mid);
  for (int l : {0, n_layer - 1}) {
    o.layer_type_k[l] = k_edge;
    o.layer_type_v[l] = v_edge;
  }
  return Status::Ok();
}

Expected<std::unique_ptr<KvCache>> KvCache::create(int n_layer, int n_kv_heads, int head_dim,
                                                   const KvCacheOptions& o) {
  if (n_layer < 1 || n_kv_heads < 1) return Status::Error("kv cache: need at least one layer and one KV head");
  if (o.capacity < 1) return Status::Error("kv cache: capacity must be at least 1 token");
  const KvPolicy* pol = o.policy.get();
  if (pol && (pol->n_layer != n_layer || pol->n_kv_heads != n_kv_heads || pol->head_dim != head_dim))
    return Status::Error("kv policy is for " + std::to_string(pol->n_layer) + " layers x " +
                         std::to_string(pol->n_kv_heads) + " KV heads x d " + std::to_string(pol->head_dim) +
                         ", the model has " + std::to_string(n_layer) + " x " + std::to_string(n_kv_heads) + " x " +
                         std::to_string(head_dim));
  for (const auto* list : {&o.layer_type_k, &o.layer_type_v})
    if (!list->empty() && list->size() != static_cast<size_t>(n_layer))
      return Status::Error("kv cache: " + std::to_string(list->size()) + " per-layer formats for " +
                           std::to_string(n_layer) + " layers");
  auto c = std::unique_ptr<KvCache>(new KvCache());
  c->opt_ = o;
  c->n_kv_heads_ = n_kv_heads;
  c->d_ = head_dim;
  c->f16_ = std::move(*make_codec("f16", head_dim));
  c->layers_.resize(n_layer);
  for (int l = 0; l < n_layer; ++l) {
    Layer& L = c->layers_[l];
    const std::string& tk = o.layer_type_k.empty() ? o.type_k : o.layer_type_k[l];  // without a policy
    const std::string& tv = o.layer_type_v.empty() ? o.type_v : o.layer_type_v[l];
    const uint64_t vseed = o.seed ^ 0x5555555555555555ull;
    Status s = pol ? policy_layer_codecs(o.policy, l, false, n_kv_heads, head_dim, o.seed, L.kc)
                   : make_layer_codecs(tk, nullptr, n_kv_heads, head_dim, o.seed, L.kc);
    if (!s.ok()) return Status::Error("cache type K (layer " + std::to_string(l) + "): " + s.message());
    s = pol ? policy_layer_codecs(o.policy, l, true, n_kv_heads, head_dim, vseed, L.vc)
            : make_layer_codecs(tv, nullptr, n_kv_heads, head_dim, vseed, L.vc);
    if (!s.ok()) return Status::Error("cache type V (layer " + std::to_string(l) + "): " + s.message());
    for (auto& x : L.kc) L.kp.push_back(x.get());
    for (auto& x : L.vc) L.vp.push_back(x.get());
    // 64 spare bytes: kernels may read a little past the last row.
    L.k = HugeBuffer(L.kc[0]->row_bytes() * size_t(n_kv_heads) * o.capacity + 64);
    L.v = HugeBuffer(L.vc[0]->row_bytes() * size_t(n_kv_heads) * o.capacity + 64);
    L.mu_k.assign(size_t(n_kv_heads) * head_dim, 0.0f);
    L.mu_v.assign(size_t(n_kv_heads) * head_dim, 0.0f);
    if (pol) {  // means from the calibration, from the first token on
      for (int h = 0; h < n_kv_heads; ++h)
        for (int i = 0; i < head_dim; ++i) {
          L.mu_k[h * head_dim + i] = pol->k[l].heads[h].mean[i];
          L.mu_v[h * head_dim + i] = pol->v[l].heads[h].mean[i];
        }
      L.centred = true;
    }
  }
  return c;
}

size_t KvCache::k_bytes() const {
  size_t b = 0;
  for (const auto& L : layers_) b += L.kc[0]->row_bytes() * size_t(n_kv_heads_) * opt_.capacity;
  return b;
}
size_t KvCache::v_bytes() const {
  size_t b = 0;
  for (const auto& L : layers_) b += L.vc[0]->row_bytes() * size_t(n_kv_heads_) * opt_.capacity;
  return b;
}
double KvCache::k_bits_per_value() const {
  double s = 0;
  for (const auto& L : layers_) s += L.kc[0]->bits_per_value();
  return s / static_cast<double>(layers_.size());
}
double KvCache::v_bits_per_value() const {
  double s = 0;
  for (const auto& L : layers_) s += L.vc[0]->bits_per_value();
  return s / static_cast<double>(layers_.size());
}

void KvCache::fix_mean(Layer& L, int n, const float* k, const float* v) {
  const int H = n_kv_heads_, d = d_;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < d; ++i) {
      double sk = 0, sv = 0;
      for (int t = 0; t < n; ++t) {
        sk += k[(size_t(t) * H + h) * d + i];
        sv += v[(size_t(t) * H + h) * d + i];
      }
      L.mu_k[h * d + i] = static_cast<float>(sk / n);
      L.mu_v[h * d + i] = static_cast<float>(sv / n);
    }
  L.centred = true;
}

Status KvCache::quantize_rows(Layer& L, int layer, int pos, int n, const float* k, const float* v) {
  const int H = n_kv_heads_, d = d_;
  std::vector<float> row(d);
  const size_t krb = L.kc[0]->row_bytes(), vrb = L.vc[0]->row_bytes();
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) {
      const float* kr = k + (size_t(t) * H + h) * d;
      const float* vr = v + (size_t(t) * H + h) * d;
      for (int i = 0; i < d; ++i) row[i] = kr[i] - (L.centred ? L.mu_k[h * d + i] : 0.0f);
      Status s = L.k_codec(h)->quantize(row.data(), 1, L.k.data() + (size_t(h) * opt_.capacity + pos + t) * krb);
      if (!s.ok())
        return Status::Error("layer " + std::to_string(layer) + " K, token " + std::to_string(pos + t) + ", head " +
                             std::to_string(h) + ": " + s.message());
      for (int i = 0; i < d; ++i) row[i] = vr[i] - (L.centred ? L.mu_v[h * d + i] : 0.0f);
      s = L.v_codec(h)->quantize(row.data(), 1, L.v.data() + (size_t(h) * opt_.capacity + pos + t) * vrb);
      if (!s.ok())
        return Status::Error("layer " + std::to_string(layer) + " V, token " + std::to_string(pos + t) + ", head " +
                             std::to_string(h) + ": " + s.message());
    }
  return Status::Ok();
}

int KvCache::mean_rows(const Layer& L) const {
  if (opt_.policy || !opt_.mean_center || opt_.mean_tokens <= 0) return 0;
  if (L.kc[0]->family() != FormatFamily::kTurbo && L.vc[0]->family() != FormatFamily::kTurbo) return 0;
  return std::min(opt_.mean_tokens, opt_.capacity);
}

int KvCache::mean_rows() const {
  int m = 0;
  for (const auto& L : layers_) m = std::max(m, mean_rows(L));
  return m;
}

int KvCache::keepable_prefix(int n) const {
  n = std::max(0, std::min(n, n_tokens()));
  const int m = mean_rows();
  // Centred from rows 0..m-1: a prefix of fewer rows would need the means of
  // other tokens. Still staging: the f16 rows are exact, any prefix is fine.
  if (m > 0 && n < m && n_tokens() >= m) return 0;
  return n;
}

Status KvCache::truncate(int n) {
  if (n < 0 || n > n_tokens())
    return Status::Error("kv cache: cannot keep " + std::to_string(n) + " of " + std::to_string(n_tokens()) + " tokens");
  if (keepable_prefix(n) != n)
    return Status::Error("kv cache: the means were fixed from the first " + std::to_string(mean_rows()) +
                         " tokens; a prefix of " + std::to_string(n) + " cannot be kept");
  for (auto& L : layers_) {
    L.written = n;
    if (n == 0 && !opt_.policy) {  // back to an empty sequence: staging and means start again
      L.staging = false;
      L.centred = false;
      L.sk.clear();
      L.sv.clear();
    }
  }
  return Status::Ok();
}

Status KvCache::append(int layer, int pos, int n, const float* k, const float* v) {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) return Status::Error("kv cache: bad layer " + std::to_string(layer));
  Layer& L = layers_[layer];
  if (pos != L.written) return Status::Error("kv cache: layer " + std::to_string(layer) + " expects position " +
                                             std::to_string(L.written) + ", got " + std::to_string(pos));
  if (n < 1) return Status::Error("kv cache: nothing to append");
  if (pos + n > opt_.capacity)
    return Status::Error("kv cache full: " + std::to_string(pos + n) + " tokens > capacity " + std::to_string(opt_.capacity) +
                         " (raise -c)");
  const int H = n_kv_heads_, d = d_;
  const int M = mean_rows(L);
  if (pos == 0 && M > 0) {
    if (n >= M) {  // enough in the first batch: mu from its first M rows now
      fix_mean(L, M, k, v);
    } else {
      L.staging = true;
      L.sk.assign(size_t(H) * M * f16_->row_bytes() + 64, 0);
      L.sv.assign(size_t(H) * M * f16_->row_bytes() + 64, 0);
    }
  }
  if (L.staging) {
    const size_t rb = f16_->row_bytes();
    for (int t = 0; t < n && pos + t < M; ++t)
      for (int h = 0; h < H; ++h) {
        Status s = f16_->quantize(k + (size_t(t) * H + h) * d, 1, L.sk.data() + (size_t(h) * M + pos + t) * rb);
        if (s.ok()) s = f16_->quantize(v + (size_t(t) * H + h) * d, 1, L.sv.data() + (size_t(h) * M + pos + t) * rb);
        if (!s.ok())
          return Status::Error("layer " + std::to_string(layer) + ", token " + std::to_string(pos + t) + ": " + s.message());
      }
    L.written = pos + n;
    if (L.written < M) return Status::Ok();
    // Enough rows seen: mu from the first M rows (the staged ones as the cache
    // holds them, in f16), then quantize all.
    const int total = L.written;
    std::vector<float> kall(size_t(total) * H * d), vall(kall.size());
    const int staged = std::min(pos, M);
    for (int t = 0; t < staged; ++t)
      for (int h = 0; h < H; ++h) {
        f16_->dequantize(L.sk.data() + (size_t(h) * M + t) * rb, 1, &kall[(size_t(t) * H + h) * d]);
        f16_->dequantize(L.sv.data() + (size_t(h) * M + t) * rb, 1, &vall[(size_t(t) * H + h) * d]);
      }
    std::copy(k, k + size_t(n) * H * d, kall.begin() + size_t(pos) * H * d);
    std::copy(v, v + size_t(n) * H * d, vall.begin() + size_t(pos) * H * d);
    fix_mean(L, M, kall.data(), vall.data());
    L.staging = false;
    L.sk.clear();
    L.sk.shrink_to_fit();
    L.sv.clear();
    L.sv.shrink_to_fit();
    return quantize_rows(L, layer, 0, total, kall.data(), vall.data());
  }
  Status s = quantize_rows(L, layer, pos, n, k, v);
  if (!s.ok()) return s;
  L.written = pos + n;
  return Status::Ok();
}

size_t KvCache::staging_bytes() const {
  size_t b = 0;
  for (const auto& l : layers_) b += l.sk.size() + l.sv.size();
  return b;
}

KvRows KvCache::k_rows(int layer) const {
  if (layers_[layer].staging) {
    const size_t rb = f16_->row_bytes();
    return {f16_.get(), layers_[layer].sk.data(), rb, rb * mean_rows(layers_[layer])};
  }
  const Layer& L = layers_[layer];
  const size_t rb = L.kc[0]->row_bytes();
  return {L.kp[0], L.k.data(), rb, rb * opt_.capacity, L.kp.size() > 1 ? L.kp.data() : nullptr};
}
KvRows KvCache::v_rows(int layer) const {
  if (layers_[layer].staging) {
    const size_t rb = f16_->row_bytes();
    return {f16_.get(), layers_[layer].sv.data(), rb, rb * mean_rows(layers_[layer])};
  }
  const Layer& L = layers_[layer];
  const size_t rb = L.vc[0]->row_bytes();
  return {L.vp[0], L.v.data(), rb, rb * opt_.capacity, L.vp.size() > 1 ? L.vp.data() : nullptr};
}

}  // namespace tkv
