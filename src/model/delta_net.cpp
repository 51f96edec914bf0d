#include "model/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tkv {

DeltaNetWeights delta_net_weights(const Matrix& conv, const Matrix& dt_bias, const Matrix& a, const Matrix& norm,
                                  const DeltaNetShape& s) {
  DeltaNetWeights w;
  w.conv.resize(size_t(s.channels()) * s.conv);
  for (int c = 0; c < s.channels(); ++c) dequantize_row(conv, c, &w.conv[size_t(c) * s.conv]);
  w.dt_bias.resize(s.v_heads);
  w.a.resize(s.v_heads);
  w.norm.resize(s.v_dim);
  dequantize_row(dt_bias, 0, w.dt_bias.data());
  dequantize_row(a, 0, w.a.data());
  dequantize_row(norm, 0, w.norm.data());
  return w;
}

namespace {

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // ggml's cut at 20
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// x / max(|x|, eps), the norm's square sum in double (ggml's l2_norm).
void l2_normalize(float* x, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = 1.0f / std::max(static_cast<float>(std::sqrt(ss)), eps);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

// One value head's tokens: q, k [n][dk] (normed, q scaled), v [n][dv],
// beta and g [n]; S [dk][dv] advanced; o [n][dv].
struct HeadSeq {
  int n, dk, dv;
  const float *q, *k, *v, *beta, *g;
  float* S;
  float* o;
};

// The recurrence, token by token: S <- e^g S; d = beta (v - S^T k);
// S += k d^T; o = S^T q. Two passes over S a token.
void recurrent(const HeadSeq& h) {
  std::vector<float> sk(h.dv), d(h.dv);
  for (int t = 0; t < h.n; ++t) {
    const float* q = h.q + size_t(t) * h.dk;
    const float* k = h.k + size_t(t) * h.dk;
    const float* v = h.v + size_t(t) * h.dv;
    float* o = h.o + size_t(t) * h.dv;
    const float decay = std::exp(h.g[t]);
    std::fill(sk.begin(), sk.end(), 0.0f);
    for (int i = 0; i < h.dk; ++i) {
      float* Si = h.S + size_t(i) * h.dv;
      for (int j = 0; j < h.dv; ++j) {
        Si[j] *= decay;
        sk[j] += Si[j] * k[i];
      }
    }
    for (int j = 0; j < h.dv; ++j) d[j] = h.beta[t] * (v[j] - sk[j]);
    std::fill(o, o + h.dv, 0.0f);
    for (int i = 0; i < h.dk; ++i) {
      float* Si = h.S + size_t(i) * h.dv;
      for (int j = 0; j < h.dv; ++j) {
        Si[j] += k[i] * d[j];
        o[j] += Si[j] * q[i];
      }
    }
  }
}

// Chunks of up to 64 tokens in the WY form: with G the running sum of g in
// the chunk and L[i][j] = beta_i (k_i . k_j) e^(G_i - G_j) for j < i,
//   U = (I + L)^-1 (beta v),  W = (I + L)^-1 (beta e^G k)   (forward substitution)
//   d = U - W S                 (the recurrence's beta (v - S^T k), all at once)
//   o_i = e^(G_i) q_i S + sum_{j<=i} (q_i . k_j) e^(G_i - G_j) d_j
//   S <- e^(G_last) S + sum_j e^(G_last - G_j) k_j d_j^T
// S is read three times a chunk instead of twice a token.
constexpr int kChunk = 64;
void chunked(const HeadSeq& h) {
  const int dk = h.dk, dv = h.dv;
  std::vector<float> G(kChunk), L(size_t(kChunk) * kChunk), U(size_t(kChunk) * dv), W(size_t(kChunk) * dk),
      QK(size_t(kChunk) * kChunk);
  for (int t0 = 0; t0 < h.n; t0 += kChunk) {
    const int c = std::min(kChunk, h.n - t0);
    const float* q = h.q + size_t(t0) * dk;
    const float* k = h.k + size_t(t0) * dk;
    const float* v = h.v + size_t(t0) * dv;
    const float* beta = h.beta + t0;
    float* o = h.o + size_t(t0) * dv;
    float acc = 0.0f;
    for (int i = 0; i < c; ++i) G[i] = acc += h.g[t0 + i];
    for (int i = 0; i < c; ++i)
      for (int j = 0; j <= i; ++j) {
        float kk = 0.0f, qk = 0.0f;
        for (int a = 0; a < dk; ++a) {
          kk += k[size_t(i) * dk + a] * k[size_t(j) * dk + a];
          qk += q[size_t(i) * dk + a] * k[size_t(j) * dk + a];
        }
        const float decay = std::exp(G[i] - G[j]);
        L[size_t(i) * kChunk + j] = beta[i] * kk * decay;
        QK[size_t(i) * kChunk + j] = qk * decay;
      }
    for (int i = 0; i < c; ++i) {
      float* u = &U[size_t(i) * dv];
      float* w = &W[size_t(i) * dk];
      const float eg = std::exp(G[i]);
      for (int j = 0; j < dv; ++j) u[j] = beta[i] * v[size_t(i) * dv + j];
      for (int a = 0; a < dk; ++a) w[a] = beta[i] * eg * k[size_t(i) * dk + a];
      for (int j = 0; j < i; ++j) {
        const float l = L[size_t(i) * kChunk + j];
        const float* uj = &U[size_t(j) * dv];
        const float* wj = &W[size_t(j) * dk];
        for (int x = 0; x < dv; ++x) u[x] -= l * uj[x];
        for (int a = 0; a < dk; ++a) w[a] -= l * wj[a];
      }
    }
    // d = U - W S (into U); o = e^G q S first (the incoming state).
    for (int i = 0; i < c; ++i) {
      float* u = &U[size_t(i) * dv];
      float* oi = o + size_t(i) * dv;
      std::fill(oi, oi + dv, 0.0f);
      const float eg = std::exp(G[i]);
      for (int a = 0; a < dk; ++a) {
        const float* Sa = h.S + size_t(a) * dv;
        const float wa = W[size_t(i) * dk + a], qa = eg * q[size_t(i) * dk + a];
        for (int x = 0; x < dv; ++x) {
          u[x] -= wa * Sa[x];
          oi[x] += qa * Sa[x];
        }
      }
    }
    for (int i = 0; i < c; ++i) {
      float* oi = o + size_t(i) * dv;
      for (int j = 0; j <= i; ++j) {
        const float s = QK[size_t(i) * kChunk + j];
        const float* dj = &U[size_t(j) * dv];
        for (int x = 0; x < dv; ++x) oi[x] += s * dj[x];
      }
    }
    const float last = std::exp(G[c - 1]);
    for (int a = 0; a < dk; ++a) {
      float* Sa = h.S + size_t(a) * dv;
      for (int x = 0; x < dv; ++x) Sa[x] *= last;
      for (int j = 0; j < c; ++j) {
        const float f = std::exp(G[c - 1] - G[j]) * k[size_t(j) * dk + a];
        const float* dj = &U[size_t(j) * dv];
        for (int x = 0; x < dv; ++x) Sa[x] += f * dj[x];
      }
    }
  }
}

}  // namespace

void delta_net(const DeltaNetShape& s, const DeltaNetWeights& w, int n, const float* mixed, const float* z,
               const float* b, const float* alpha, float eps, float* state, float* out, int threads, DeltaMode mode) {
  const int C = s.channels(), K = s.conv, Hk = s.k_heads, Hv = s.v_heads, dk = s.k_dim, dv = s.v_dim;
  // The convolution over [conv state; mixed], then SiLU; the state keeps the
  // last K - 1 inputs.
  std::vector<float> all(size_t(K - 1 + n) * C), y(size_t(n) * C);
  std::memcpy(all.data(), state, sizeof(float) * s.conv_state());
  std::memcpy(all.data() + s.conv_state(), mixed, sizeof(float) * size_t(n) * C);
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= 8)
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (int tau = 0; tau < K; ++tau) acc += all[size_t(t + tau) * C + c] * w.conv[size_t(c) * K + tau];
      y[size_t(t) * C + c] = acc / (1.0f + std::exp(-acc));
    }
  std::memcpy(state, all.data() + size_t(n) * C, sizeof(float) * s.conv_state());
  // q and k per key head normalised (q also scaled), per token.
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int t = 0; t < n; ++t)
    for (int hh = 0; hh < 2 * Hk; ++hh) {
      float* x = &y[size_t(t) * C + size_t(hh) * dk];
      l2_normalize(x, dk, eps);
      if (hh < Hk)
        for (int i = 0; i < dk; ++i) x[i] *= qscale;
    }
  float* S0 = state + s.conv_state();
  const bool use_chunks = mode == DeltaMode::kChunked || (mode == DeltaMode::kAuto && n > 1);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int h = 0; h < Hv; ++h) {
    const int kh = h % Hk;  // llama.cpp's tiled order of value heads over key heads
    std::vector<float> q(size_t(n) * dk), k(size_t(n) * dk), v(size_t(n) * dv), beta(n), g(n), o(size_t(n) * dv);
    for (int t = 0; t < n; ++t) {
      const float* yt = &y[size_t(t) * C];
      std::memcpy(&q[size_t(t) * dk], yt + size_t(kh) * dk, sizeof(float) * dk);
      std::memcpy(&k[size_t(t) * dk], yt + size_t(Hk + kh) * dk, sizeof(float) * dk);
      std::memcpy(&v[size_t(t) * dv], yt + size_t(2 * Hk) * dk + size_t(h) * dv, sizeof(float) * dv);
      beta[t] = sigmoid(b[size_t(t) * Hv + h]);
      g[t] = w.a[h] * softplus(alpha[size_t(t) * Hv + h] + w.dt_bias[h]);
    }
    const HeadSeq hs{n, dk, dv, q.data(), k.data(), v.data(), beta.data(), g.data(), S0 + size_t(h) * dk * dv,
                     o.data()};
    if (use_chunks) chunked(hs);
    else recurrent(hs);
    // The gated norm: rmsnorm(o) * norm * silu(z).
    for (int t = 0; t < n; ++t) {
      const float* ot = &o[size_t(t) * dv];
      const float* zt = z + size_t(t) * Hv * dv + size_t(h) * dv;
      double ss = 0;
      for (int j = 0; j < dv; ++j) ss += double(ot[j]) * ot[j];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / dv + eps));
      float* dst = out + size_t(t) * Hv * dv + size_t(h) * dv;
      for (int j = 0; j < dv; ++j) dst[j] = ot[j] * inv * w.norm[j] * (zt[j] / (1.0f + std::exp(-zt[j])));
    }
  }
}

}  // namespace tkv
