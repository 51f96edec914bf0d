#include "cache/kv_layout.h"

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

Status apply_kv_policy_or_preset(const std::string& policy_path, const std::string& preset, int n_layer,
                                 uint64_t model, KvCacheOptions& o) {
  if (!policy_path.empty() && !preset.empty()) return Status::Error("give a KV policy or a preset, not both");
  if (!preset.empty()) return apply_kv_preset(preset, n_layer, o);
  if (policy_path.empty()) return Status::Ok();
  auto p = read_kv_policy(policy_path, model);
  if (!p) return p.status();
  if (p->protect_sinks > 0 || p->protect_recent > 0) {  // chosen with the widths (calibrate --protect)
    o.protect_sinks = p->protect_sinks;
    o.protect_recent = p->protect_recent;
    o.protect_type = p->protect_type;
  }
  o.policy = std::make_shared<const KvPolicy>(std::move(*p));
  return Status::Ok();
}

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
  } else if (preset == "tiny") {
    // Long contexts below 2.5 bits: each query's last 32 tokens read from
    // q8_0 rows (protected tokens, RESULTS §17: 2.38 bits per value at 2048
    // tokens, KLD 0.0168 on ref-5m against plain tq2.5-ip's 0.0267 at 2.5;
    // the ring of 32 q8_0 rows costs 0.53 bits at 512 tokens, 0.03 at 8K, and
    // holds 32 tokens since a step reads its own rows from a copy: 16 had the
    // same cost and 0.0039 at 512 tokens against 32's 0.0027; decode at 64K
    // as fast as tq2's. tq2.5-ip for K: 0.0134 at 2.51 bits, but 0.89x tq2's
    // decode speed at 64K).
    k_mid = k_edge = v_mid = v_edge = "tq2-ip";
    o.protect_sinks = 0;
    o.protect_recent = 32;
    o.protect_type = "q8_0";
  } else if (preset == "tiny-e8") {
    // tiny's protection over E8 lattice rows (te8, 2.25 bits; RESULTS §17.3):
    // KLD 0.0104 at 2.38 bits at 2048 tokens on ref-5m, against tiny's
    // 0.0168 at the same size; attention decode at 64K 0.73x tq2's speed.
    k_mid = k_edge = v_mid = v_edge = "te8";
    o.protect_sinks = 0;
    o.protect_recent = 32;
    o.protect_type = "q8_0";
  } else {
    return Status::Error("unknown --kv-preset '" + preset + "' (quality, balanced, compact, tiny or tiny-e8)");
  }
  o.layer_type_k.assign(n_layer, k_mid);
  o.layer_type_v.assign(n_layer, v_mid);
  for (int l : {0, n_layer - 1}) {
    o.layer_type_k[l] = k_edge;
    o.layer_type_v[l] = v_edge;
  }
  return Status::Ok();
}

Expected<std::shared_ptr<const KvLayout>> KvLayout::create(const KvShape& shape, const KvCacheOptions& o) {
  const int n_layer = shape.n_layer, n_kv_heads = shape.n_kv_heads, head_dim = shape.head_dim;
  if (n_layer < 1 || n_kv_heads < 1) return Status::Error("kv cache: need at least one layer and one KV head");
  if (!shape.window.empty() && shape.window.size() != size_t(n_layer))
    return Status::Error("kv cache: " + std::to_string(shape.window.size()) + " layer windows for " +
                         std::to_string(n_layer) + " layers");
  for (int w : shape.window)
    if (w < 0 || w > (1 << 24)) return Status::Error("kv cache: sliding window " + std::to_string(w) + " is out of range");
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
  auto c = std::shared_ptr<KvLayout>(new KvLayout());
  c->opt_ = o;
  c->shape_ = shape;
  c->n_kv_heads_ = n_kv_heads;
  c->d_ = head_dim;
  auto f16 = make_codec("f16", head_dim);
  if (!f16) return f16.status();
  c->f16_ = std::move(*f16);
  c->layers_.resize(n_layer);
  for (int l = 0; l < n_layer; ++l) {
    LayerCodecs& L = c->layers_[l];
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
    L.k_row = L.kc[0]->row_bytes();
    L.v_row = L.vc[0]->row_bytes();
    const bool tq = L.kc[0]->family() == FormatFamily::kTurbo || L.vc[0]->family() == FormatFamily::kTurbo;
    L.mean_rows = pol || !o.mean_center || o.mean_tokens <= 0 || !tq ? 0 : std::min(o.mean_tokens, o.capacity);
  }
  if (o.protect_sinks < 0 || o.protect_recent < 0 || o.protect_sinks > (1 << 20) || o.protect_recent > (1 << 20))
    return Status::Error("kv cache: protected tokens (sinks " + std::to_string(o.protect_sinks) + ", recent " +
                         std::to_string(o.protect_recent) + ") out of range");
  if (o.protect_sinks > 0 || o.protect_recent > 0) {  // the protected rows: every layer in protect_type
    KvCacheOptions h;
    h.type_k = h.type_v = o.protect_type;
    h.capacity = o.capacity;
    h.seed = o.seed;
    h.mean_center = false;
    auto hl = create(KvShape(n_layer, n_kv_heads, head_dim), h);
    if (!hl) return Status::Error("protected tokens: " + hl.error());
    c->hi_ = std::move(*hl);
  }
  return std::shared_ptr<const KvLayout>(std::move(c));
}

int KvLayout::mean_rows() const {
  int m = 0;
  for (const auto& L : layers_) m = std::max(m, L.mean_rows);
  return m;
}

size_t KvLayout::bytes_per_token(bool window_layers) const {
  size_t b = 0;
  for (int l = 0; l < n_layer(); ++l)
    if ((window(l) > 0) == window_layers) b += (layers_[l].k_row + layers_[l].v_row) * size_t(n_kv_heads_);
  return b;
}

bool KvLayout::has_windows() const {
  for (int l = 0; l < n_layer(); ++l)
    if (window(l) > 0) return true;
  return false;
}

int KvLayout::append_step(int l) const {
  if (window(l) > 0) return kWindowStep;
  if (protects(l) && opt_.protect_recent > 0) return kProtectStep;
  return 0;
}

int KvLayout::protect_ring_tokens() const {
  if (!hi_ || opt_.protect_recent == 0) return 0;
  // protect_recent rows: a step's queries read the rows before it from the
  // ring and their own from a copy (KvCache::attend_step).
  const int need = std::min(opt_.protect_recent, opt_.capacity);
  return (need + kRingBlock - 1) / kRingBlock * kRingBlock;
}

int KvLayout::ring_tokens(int l) const {
  const int w = window(l);
  if (w == 0) return 0;
  // W rows: a step's queries read the W - 1 rows before it from the ring and
  // their own rows from a scratch copy (KvCache::attend_step). Until the means
  // are fixed a step appends first: the ring then holds the first mean_rows
  // plus a step. A context no longer than the ring never wraps.
  const int M = layers_[l].mean_rows;
  const int need = std::min(std::max(w, M > 0 ? M - 1 + kWindowStep : 0), opt_.capacity);
  return (need + kRingBlock - 1) / kRingBlock * kRingBlock;
}

int KvLayout::max_ring_tokens() const {
  int ring = 0;
  for (int l = 0; l < n_layer(); ++l) ring = std::max(ring, ring_tokens(l));
  return ring;
}

bool KvLayout::compatible(const KvLayout& o) const {
  if (n_layer() != o.n_layer() || n_kv_heads_ != o.n_kv_heads_ || d_ != o.d_ || opt_.seed != o.opt_.seed) return false;
  if (shape_.window != o.shape_.window && (has_windows() || o.has_windows())) return false;
  if (opt_.protect_sinks != o.opt_.protect_sinks || opt_.protect_recent != o.opt_.protect_recent ||
      (hi_ && opt_.protect_type != o.opt_.protect_type))
    return false;
  if ((opt_.policy ? opt_.policy->fingerprint() : 0) != (o.opt_.policy ? o.opt_.policy->fingerprint() : 0)) return false;
  for (int l = 0; l < n_layer(); ++l) {
    const LayerCodecs &a = layers_[l], &b = o.layers_[l];
    if (a.kc[0]->name() != b.kc[0]->name() || a.vc[0]->name() != b.vc[0]->name() || a.mean_rows != b.mean_rows)
      return false;
  }
  return true;
}

}  // namespace tkv
