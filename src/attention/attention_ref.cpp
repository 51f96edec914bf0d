#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention/attention.h"

namespace tkv {

Status check_attention_args(const AttentionArgs& a) {
  auto err = [](const std::string& m) { return Status::Error("attention: " + m); };
  if (!a.q || !a.out) return err("null query or output pointer");
  if (!a.k.codec || !a.v.codec) return err("K and V codecs are required");
  if (a.n_kv > 0 && (!a.k.data || !a.v.data)) return err("null K or V data");
  if (a.n_q < 1 || a.n_q_heads < 1 || a.n_kv_heads < 1 || a.n_kv < 0)
    return err("bad shape: n_q " + std::to_string(a.n_q) + ", n_q_heads " + std::to_string(a.n_q_heads) +
               ", n_kv_heads " + std::to_string(a.n_kv_heads) + ", n_kv " + std::to_string(a.n_kv));
  if (a.n_q_heads % a.n_kv_heads != 0)
    return err("n_q_heads " + std::to_string(a.n_q_heads) + " is not a multiple of n_kv_heads " +
               std::to_string(a.n_kv_heads));
  if (a.n_q_heads / a.n_kv_heads > 64)
    return err("GQA ratio " + std::to_string(a.n_q_heads / a.n_kv_heads) + " is above the supported 64");
  if (a.k.codec->dim() != a.d || a.v.codec->dim() != a.d)
    return err("head dim " + std::to_string(a.d) + " does not match the K/V codecs (" +
               std::to_string(a.k.codec->dim()) + ", " + std::to_string(a.v.codec->dim()) + ")");
  for (const KvRows* r : {&a.k, &a.v})
    if (r->heads)
      for (int h = 0; h < a.n_kv_heads; ++h)
        if (!r->heads[h] || r->heads[h]->dim() != a.d || r->heads[h]->row_bytes() != r->codec->row_bytes())
          return err("per-head codec " + std::to_string(h) + " is missing or does not match the head dim / row size");
  if (a.threads < 1) return err("threads must be >= 1");
  if (a.kv_begin < 0 || a.causal_lag < 0) return err("kv_begin and causal_lag must be >= 0");
  if (a.window < 0 || (a.window > 0 && a.causal_offset < 0))
    return err("a sliding window (" + std::to_string(a.window) + ") needs a causal mask and must be >= 0");
  if (!(a.sparse_v >= 0.0f && a.sparse_v < 1.0f)) return err("sparse_v threshold must be in [0, 1)");
  if (a.sinks)
    for (int h = 0; h < a.n_q_heads; ++h)
      if (!std::isfinite(a.sinks[h])) return err("attention sink of head " + std::to_string(h) + " is not finite");
  return Status::Ok();
}

Status attention_ref(const AttentionArgs& a) {
  Status s = check_attention_args(a);
  if (!s.ok()) return s;
  const int d = a.d, g = a.n_q_heads / a.n_kv_heads;
  const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const size_t ks = a.k.token_stride ? a.k.token_stride : a.n_kv_heads * a.k.codec->row_bytes();
  const size_t vs = a.v.token_stride ? a.v.token_stride : a.n_kv_heads * a.v.codec->row_bytes();
  const size_t khs = a.k.head_stride ? a.k.head_stride : a.k.codec->row_bytes();
  const size_t vhs = a.v.head_stride ? a.v.head_stride : a.v.codec->row_bytes();
  // Dequantize every row once (original domain, mean added back).
  std::vector<float> K(static_cast<size_t>(a.n_kv) * a.n_kv_heads * d), V(K.size());
  for (int t = 0; t < a.n_kv; ++t)
    for (int h = 0; h < a.n_kv_heads; ++h) {
      float* kr = &K[(static_cast<size_t>(t) * a.n_kv_heads + h) * d];
      float* vr = &V[(static_cast<size_t>(t) * a.n_kv_heads + h) * d];
      a.k.head(h)->dequantize(a.k.row(t, h, ks, khs), 1, kr, Impl::kRef);
      a.v.head(h)->dequantize(a.v.row(t, h, vs, vhs), 1, vr, Impl::kRef);
      for (int i = 0; i < d; ++i) {
        if (a.mu_k) kr[i] += a.mu_k[h * d + i];
        if (a.mu_v) vr[i] += a.mu_v[h * d + i];
      }
    }
  std::vector<double> sc(a.n_kv);
  for (int i = 0; i < a.n_q; ++i)
    for (int hq = 0; hq < a.n_q_heads; ++hq) {
      const int h = hq / g;
      const float* q = a.q + (static_cast<size_t>(i) * a.n_q_heads + hq) * d;
      float* o = a.out + (static_cast<size_t>(i) * a.n_q_heads + hq) * d;
      int limit = a.causal_offset < 0 ? a.n_kv : std::min(a.n_kv, a.causal_offset + i + 1 - a.causal_lag);
      const int start = std::max(a.kv_begin, a.window > 0 ? std::max(0, a.causal_offset + i + 1 - a.window) : 0);
      float* lse = a.lse ? a.lse + static_cast<size_t>(i) * a.n_q_heads + hq : nullptr;
      if (limit <= start) {
        if (lse) *lse = -INFINITY;  // nothing visible: output zeros (plus nothing)
        for (int c = 0; c < d; ++c) o[c] = 0.0f;
        continue;
      }
      double mx = -INFINITY;
      for (int t = start; t < limit; ++t) {
        const float* kr = &K[(static_cast<size_t>(t) * a.n_kv_heads + h) * d];
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * kr[c];
        sc[t] = dot * scale;
        mx = std::max(mx, sc[t]);
      }
      double sum = 0;
      std::vector<double> acc(d, 0.0);
      for (int t = start; t < limit; ++t) {
        const double p = std::exp(sc[t] - mx);
        sum += p;
        const float* vr = &V[(static_cast<size_t>(t) * a.n_kv_heads + h) * d];
        for (int c = 0; c < d; ++c) acc[c] += p * vr[c];
      }
      // A sink adds e^(sink) to the denominator (no value).
      const double total = sum + (a.sinks ? std::exp(double(a.sinks[hq]) - mx) : 0.0);
      for (int c = 0; c < d; ++c) o[c] = static_cast<float>(acc[c] / total);
      if (lse) *lse = static_cast<float>(mx + std::log(total));
    }
  return Status::Ok();
}

}  // namespace tkv
