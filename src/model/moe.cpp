#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace tkv {

Routing route(const float* logits, int n_expert, int n_used, float weights_scale, bool softmax_after_topk) {
  if (softmax_after_topk) {  // gpt-oss: the top k by logit, a softmax over those k
    std::vector<int> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    bool nan = false;
    for (int e = 0; e < n_expert; ++e) nan |= std::isnan(logits[e]);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return !std::isnan(logits[a]) && (std::isnan(logits[b]) || logits[a] > logits[b]);
    });
    Routing r;
    r.expert.assign(order.begin(), order.begin() + n_used);
    const float mx = logits[r.expert[0]];
    float sum = 0.0f;
    for (int e : r.expert) sum += std::exp(logits[e] - mx);
    for (int e : r.expert) r.weight.push_back(nan ? std::nanf("") : std::exp(logits[e] - mx) / sum);
    return r;
  }
  // Softmax over every expert (f32, as llama.cpp's ggml_soft_max).
  float mx = logits[0];
  for (int e = 1; e < n_expert; ++e) mx = std::max(mx, logits[e]);
  std::vector<float> p(n_expert);
  float sum = 0.0f;
  for (int e = 0; e < n_expert; ++e) sum += (p[e] = std::exp(logits[e] - mx));
  for (float& x : p) x /= sum;
  // NaN (broken router weights or activations) must not reach the sort as
  // a value (no strict order): sort it last, and give the chosen experts NaN
  // weights so the output, and the logits check, say so.
  bool nan = false;
  for (float& x : p)
    if (std::isnan(x)) {
      nan = true;
      x = -1.0f;
    }
  std::vector<int> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  Routing r;
  r.expert.assign(order.begin(), order.begin() + n_used);
  float wsum = 0.0f;
  for (int e : r.expert) wsum += p[e];
  for (int e : r.expert) {
    float w = p[e] / wsum;  // renormalised over the chosen ones
    if (weights_scale != 0.0f) w *= weights_scale;
    r.weight.push_back(nan ? std::nanf("") : w);
  }
  return r;
}

void moe_ffn(const MoeWeights& w, const float* h, int n, float* out, const MatmulFn& mm) {
  const int E = static_cast<int>(w.router.cols), n_expert = static_cast<int>(w.router.rows), k = w.n_used;
  std::vector<float> logits(size_t(n) * n_expert);
  mm(w.router, h, n, logits.data());
  // A bias row added to each of n rows of width m.
  auto add_bias = [](const Matrix& b, float* y, int rows, int m) {
    if (b.rows == 0) return;
    std::vector<float> bv(m);
    dequantize_row(b, 0, bv.data());
    for (int t = 0; t < rows; ++t)
      for (int i = 0; i < m; ++i) y[size_t(t) * m + i] += bv[i];
  };
  add_bias(w.router_b, logits.data(), n, n_expert);
  std::vector<Routing> r(n);
  for (int t = 0; t < n; ++t)
    r[t] = route(&logits[size_t(t) * n_expert], n_expert, k, w.weights_scale, w.softmax_after_topk);
  // Each expert once, on the tokens that chose it; its outputs land in the
  // token's slot for that choice, summed below in the routing's order.
  std::vector<float> slot(size_t(n) * k * E), xe, g, u, d;
  std::vector<std::pair<int, int>> who;  // (token, choice)
  for (int e = 0; e < n_expert; ++e) {
    who.clear();
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < k; ++j)
        if (r[t].expert[j] == e) who.emplace_back(t, j);
    if (who.empty()) continue;
    const int m = static_cast<int>(who.size());
    const int F = static_cast<int>(w.gate[e].rows);
    xe.resize(size_t(m) * E);
    g.resize(size_t(m) * F);
    u.resize(g.size());
    d.resize(size_t(m) * E);
    for (int i = 0; i < m; ++i) std::memcpy(&xe[size_t(i) * E], h + size_t(who[i].first) * E, sizeof(float) * E);
    mm(w.gate[e], xe.data(), m, g.data());
    mm(w.up[e], xe.data(), m, u.data());
    if (!w.gate_b.empty()) {
      add_bias(w.gate_b[e], g.data(), m, F);
      add_bias(w.up_b[e], u.data(), m, F);
    }
    if (w.swiglu_limit > 0.0f) {  // gpt-oss's clamped SwiGLU
      const float lim = w.swiglu_limit;
      for (size_t i = 0; i < g.size(); ++i) {
        const float x = std::min(g[i], lim), y = std::min(std::max(u[i], -lim), lim);
        g[i] = x / (1.0f + std::exp(-kSwigluOaiAlpha * x)) * (y + 1.0f);
      }
    } else {
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];  // SwiGLU
    }
    mm(w.down[e], g.data(), m, d.data());
    if (!w.down_b.empty()) add_bias(w.down_b[e], d.data(), m, E);
    for (int i = 0; i < m; ++i)
      std::memcpy(&slot[(size_t(who[i].first) * k + who[i].second) * E], &d[size_t(i) * E], sizeof(float) * E);
  }
  for (int t = 0; t < n; ++t) {
    float* y = out + size_t(t) * E;
    std::fill(y, y + E, 0.0f);
    for (int j = 0; j < k; ++j) {
      const float* s = &slot[(size_t(t) * k + j) * E];
      for (int i = 0; i < E; ++i) y[i] += r[t].weight[j] * s[i];
    }
  }
  if (w.shared_gate.rows == 0) return;
  const int F = static_cast<int>(w.shared_gate.rows);
  g.resize(size_t(n) * F);
  u.resize(g.size());
  d.resize(size_t(n) * E);
  std::vector<float> gate(n);
  mm(w.shared_gate, h, n, g.data());
  mm(w.shared_up, h, n, u.data());
  mm(w.shared_router, h, n, gate.data());
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  mm(w.shared_down, g.data(), n, d.data());
  for (int t = 0; t < n; ++t) {
    const float s = 1.0f / (1.0f + std::exp(-gate[t]));
    for (int i = 0; i < E; ++i) out[size_t(t) * E + i] += s * d[size_t(t) * E + i];
  }
}

}  // namespace tkv
