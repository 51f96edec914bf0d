// The forward pass: embeddings, then per layer its token mixer (attention on
// the compressed cache, or a Gated DeltaNet on the sequence's recurrent
// state) and its feed-forward (SwiGLU, GeGLU or experts), then the logits.
// Every architecture runs through here, by the features its loader set.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "model/delta_net.h"
#include "model/model.h"

namespace tkv {
namespace {

// out = x / rms(x) * w for one row, w already as floats.
void rmsnorm_row(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void rmsnorm(const float* x, const Matrix& w, int n, float eps, float* out, std::vector<float>& wbuf) {
  wbuf.resize(n);
  dequantize_row(w, 0, wbuf.data());
  rmsnorm_row(x, wbuf.data(), n, eps, out);
}

// The elementwise parts of a prompt run on every thread: on one they were 8 %
// of an F16 pp512 at two threads (perf: rope's sincos/pow per head, the
// SwiGLU exp, norms), time the second core spent waiting in a barrier.
// Decode (a few rows) stays on the calling thread. Each row's arithmetic is
// the same either way, so the bits do not depend on the thread count.
constexpr int kParallelRows = 8;

// rmsnorm of n_rows rows of width n, the weight dequantized once.
void rmsnorm_rows(const float* x, int n_rows, const Matrix& w, int n, float eps, float* out, int threads) {
  std::vector<float> wv(n);
  dequantize_row(w, 0, wv.data());
#pragma omp parallel for num_threads(threads) schedule(static) if (n_rows >= kParallelRows)
  for (int t = 0; t < n_rows; ++t) rmsnorm_row(x + size_t(t) * n, wv.data(), n, eps, out + size_t(t) * n);
}

// The rotation angles of one position, as ggml's rope (rope_yarn): pair i's
// extrapolated angle is p * base^(-2i/dims) / factors[i] (Llama 3's
// rope_freqs or Phi-3's LongRoPE factors, when given), the interpolated one
// that divided by the scale; with YaRN (c.yarn_ext_factor != 0) the two are
// mixed by a ramp over the pairs between the correction dims, and cos and
// sin get (1 + 0.1 ln scale) on top of c.rope_mscale.
// base and scale are the layer's (gemma3's window layers have their own).
void rope_angles(int dims, int pos, float base, float scale, const ModelConfig& c, const float* factors, float* cs,
                 float* sn) {
  float mscale = c.rope_mscale, lo = 0.0f, hi = 0.0f;
  if (c.yarn_ext_factor != 0.0f) {
    // ggml_rope_yarn_corr_dims: the pair whose wavelength fits n_ctx_orig / beta times.
    auto corr = [&](float beta) {
      return dims * std::log(c.n_ctx_orig / (beta * 2.0f * static_cast<float>(M_PI))) / (2.0f * std::log(base));
    };
    lo = std::max(0.0f, std::floor(corr(c.yarn_beta_fast)));
    hi = std::min(static_cast<float>(dims - 1), std::ceil(corr(c.yarn_beta_slow)));
    mscale *= 1.0f + 0.1f * std::log(scale);
  }
  for (int i = 0; i < dims / 2; ++i) {
    float extrap = static_cast<float>(pos) * std::pow(base, -2.0f * i / dims);
    if (factors) extrap /= factors[i];
    float theta = extrap / scale;
    if (c.yarn_ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - lo) / std::max(0.001f, hi - lo);
      const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * c.yarn_ext_factor;
      theta = theta * (1.0f - mix) + extrap * mix;
    }
    cs[i] = std::cos(theta) * mscale;
    sn[i] = std::sin(theta) * mscale;
  }
}

// Rotates pairs of one head vector in place by the angles of its position.
void rope(float* v, int dims, const float* cs, const float* sn, const ModelConfig& c) {
  for (int i = 0; i < dims / 2; ++i) {
    const int a = c.rope_neox ? i : 2 * i;
    const int b = c.rope_neox ? i + dims / 2 : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * cs[i] - x1 * sn[i];
    v[b] = x0 * sn[i] + x1 * cs[i];
  }
}

}  // namespace

Status Model::forward(const int32_t* tokens, int n, int pos, KvCache& cache, int threads, float* logits,
                      bool all_logits, const KvObserver& observe) const {
  return run({BatchSeq{&cache, tokens, n, pos, logits}}, threads, all_logits, observe);
}

Status Model::forward_batch(const std::vector<BatchSeq>& seqs, int threads) const {
  return run(seqs, threads, false, {});
}

namespace {

// NaN or Inf logits come from broken weights or an activation that overflowed;
// sampling or scoring them would give garbage text or a NaN perplexity.
Status check_logits(const float* lg, int n_vocab, int pos) {
  for (int v = 0; v < n_vocab; ++v)
    if (!std::isfinite(lg[v]))
      return Status::Error("model: the logits of the token at position " + std::to_string(pos) + " are not finite (" +
                           std::to_string(lg[v]) + " at vocabulary index " + std::to_string(v) +
                           "): the model's weights are broken or an activation overflowed");
  return Status::Ok();
}

}  // namespace

struct ForwardPass {
  const Model& M;
  const ModelConfig& c;
  const std::vector<Model::BatchSeq>& seqs;
  const int threads;
  // Rows: the one-token sequences first (one matmul_tokens group), then each
  // longer sequence's rows (one matmul each).
  std::vector<size_t> order, row0;
  int n_single = 0, n = 0;
  std::vector<float> x, h, tmp, wbuf;
  // The layers' scratch (Q, K, V, attention out, gate; FFN gate and up),
  // kept for the pass: allocated and zeroed once, not per layer (a 512-token
  // prefill of a 0.85B model zeroed ~34 MB a layer on one thread while the
  // other waited; every element is written before it is read).
  std::vector<float> sq, sk, sv, satt, sgate, sqg, sg, su;
  std::vector<int> row_pos;
  std::vector<const float*> row_factors;

  ForwardPass(const Model& m, const std::vector<Model::BatchSeq>& s, int th)
      : M(m), c(m.cfg_), seqs(s), threads(th) {}

  // y = W x over every row, grouped as above.
  void mm(const Matrix& w, const float* in, float* out) const {
    if (n_single > 0) matmul_tokens(w, in, n_single, out, threads);
    for (size_t k = n_single; k < order.size(); ++k) {
      const size_t i = order[k];
      matmul(w, in + row0[i] * w.cols, seqs[i].n, out + row0[i] * w.rows, threads);
    }
  }
  // Several matrices of one input (Q, K, V; gate, up): for a step of one
  // token, one parallel region for all (matmul_many: the same bits as mm).
  void mm_same_input(const float* in, std::initializer_list<std::pair<const Matrix*, float*>> mats) const {
    if (n == 1 && mats.size() <= 4) {
      const Matrix* ws[4];
      float* ys[4];
      int k = 0;
      for (const auto& m : mats) {
        ws[k] = m.first;
        ys[k++] = m.second;
      }
      matmul_many(ws, k, in, ys, threads);
      return;
    }
    for (const auto& m : mats) mm(*m.first, in, m.second);
  }
  void add_rows(float* dst, const float* src) const {  // the residual connection
    const int64_t n_x = static_cast<int64_t>(x.size());
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelRows)
    for (int64_t i = 0; i < n_x; ++i) dst[i] += src[i];
  }
  // A layer's output, normed first where the architecture has post norms,
  // scaled where it has a residual scale (Granite).
  void residual(const Matrix& post_norm) {
    if (post_norm.rows) rmsnorm_rows(tmp.data(), n, post_norm, c.n_embd, c.eps, tmp.data(), threads);
    if (c.residual_scale != 0.0f)
      for (float& v : tmp) v *= c.residual_scale;
    add_rows(x.data(), tmp.data());
  }
  // The norm before a token mixer or feed-forward (OLMo 2 has none: h = x).
  void pre_norm(const Matrix& norm) {
    if (norm.rows) rmsnorm_rows(x.data(), n, norm, c.n_embd, c.eps, h.data(), threads);
    else std::copy(x.begin(), x.end(), h.begin());
  }

  Status plan() {
    if (seqs.empty()) return Status::Error("forward: no sequences");
    row0.assign(seqs.size(), 0);
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].n == 1) order.push_back(i);
    n_single = static_cast<int>(order.size());
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].n != 1) order.push_back(i);
    for (size_t i : order) {
      const Model::BatchSeq& s = seqs[i];
      if (s.n < 1 || !s.cache || !s.tokens) return Status::Error("forward: sequence " + std::to_string(i) + " has no tokens");
      if (s.cache->n_layer() != c.n_kv_layer() || s.cache->n_kv_heads() != c.n_head_kv ||
          s.cache->head_dim() != c.head_dim || s.cache->has_state() != (c.n_kv_layer() < c.n_layer))
        return Status::Error("forward: the cache of sequence " + std::to_string(i) +
                             " was not made for this model's shape (Model::config().kv_shape())");
      for (int t = 0; t < s.n; ++t)
        if (s.tokens[t] < 0 || s.tokens[t] >= c.n_vocab)
          return Status::Error("forward: token id " + std::to_string(s.tokens[t]) + " is outside the vocabulary (" +
                               std::to_string(c.n_vocab) + ")");
      row0[i] = static_cast<size_t>(n);
      n += s.n;
    }
    // Each row's position (its sequence's start + its index there), and its
    // LongRoPE factors: long ones for a sequence whose cache holds more than
    // the original context (as llama.cpp chooses by context size).
    row_pos.assign(n, 0);
    row_factors.assign(n, nullptr);
    for (size_t i : order)
      for (int t = 0; t < seqs[i].n; ++t) {
        row_pos[row0[i] + t] = seqs[i].pos + t;
        if (!M.rope_long_.empty())
          row_factors[row0[i] + t] =
              seqs[i].cache->capacity() > c.n_ctx_orig ? M.rope_long_.data() : M.rope_short_.data();
        else if (!M.rope_freqs_.empty())
          row_factors[row0[i] + t] = M.rope_freqs_.data();
      }
    return Status::Ok();
  }

  void embed() {
    const int E = c.n_embd;
    x.assign(size_t(n) * E, 0.0f);
    h.assign(x.size(), 0.0f);
    tmp.assign(x.size(), 0.0f);
    wbuf.resize(std::max(E, c.n_head * c.head_dim * 2));
    for (size_t i : order)
      for (int t = 0; t < seqs[i].n; ++t) dequantize_row(M.tok_embd_, seqs[i].tokens[t], &x[(row0[i] + t) * E]);
    if (c.embd_scale > 0.0f)
      for (float& v : x) v *= c.embd_scale;
  }

  void add_bias(std::vector<float>& y, const Matrix& b, int width) {
    if (b.rows == 0) return;
    dequantize_row(b, 0, wbuf.data());
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < width; ++i) y[size_t(t) * width + i] += wbuf[i];
  }

  // Attention on layer l's cache layer kl: Q/K/V, their norms and rotary
  // positions, then per sequence the rows appended and attention (a layer
  // with a ring in steps of the few tokens it takes at once).
  Status attention_layer(int l, int kl, const Model::KvObserver& observe) {
    const LayerWeights& L = M.layers_[l];
    const int hd = c.head_dim, Dq = c.n_head * hd, Dkv = c.n_head_kv * hd;
    const int W = c.window[l];
    sq.resize(size_t(n) * Dq);
    sk.resize(size_t(n) * Dkv);
    sv.resize(size_t(n) * Dkv);
    satt.resize(size_t(n) * Dq);
    std::vector<float>&q = sq, &k = sk, &v = sv, &att = satt, &gate = sgate;
    pre_norm(L.attn_norm);
    std::vector<float>& qg = sqg;  // qwen35: per head its query then its gate
    if (c.attn_gate) qg.resize(size_t(n) * Dq * 2);
    mm_same_input(h.data(), {{&L.wq, c.attn_gate ? qg.data() : q.data()}, {&L.wk, k.data()}, {&L.wv, v.data()}});
    if (c.attn_gate) {
      gate.resize(q.size());
      for (int r = 0; r < n; ++r)
        for (int hh = 0; hh < c.n_head; ++hh) {
          const float* src = &qg[(size_t(r) * c.n_head + hh) * 2 * hd];
          std::memcpy(&q[(size_t(r) * c.n_head + hh) * hd], src, sizeof(float) * hd);
          std::memcpy(&gate[(size_t(r) * c.n_head + hh) * hd], src + hd, sizeof(float) * hd);
        }
    }
    add_bias(q, L.bq, Dq);
    add_bias(k, L.bk, Dkv);
    add_bias(v, L.bv, Dkv);
    std::vector<float> qn, kn;  // per head, or over all heads (qk_norm_full)
    if (L.q_norm.rows) {
      qn.resize(L.q_norm.cols);
      kn.resize(L.k_norm.cols);
      dequantize_row(L.q_norm, 0, qn.data());
      dequantize_row(L.k_norm, 0, kn.data());
    }
    const float base = W > 0 ? c.rope_base_swa : c.rope_base, scale = W > 0 ? c.rope_scale_swa : c.rope_scale;
    const bool rotate = c.no_rope.empty() || !c.no_rope[l];
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelRows)
    for (int r = 0; r < n; ++r) {
      float head[kMaxHeadDim], cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
      if (c.qk_norm_full) {  // one norm over each whole vector, in place
        rmsnorm_row(&q[size_t(r) * Dq], qn.data(), Dq, c.eps, &q[size_t(r) * Dq]);
        rmsnorm_row(&k[size_t(r) * Dkv], kn.data(), Dkv, c.eps, &k[size_t(r) * Dkv]);
      }
      if (rotate) rope_angles(c.rope_dims, row_pos[r], base, scale, c, row_factors[r], cs, sn);
      for (int hh = 0; hh < c.n_head + c.n_head_kv; ++hh) {
        float* vv = hh < c.n_head ? &q[size_t(r) * Dq + hh * hd] : &k[size_t(r) * Dkv + (hh - c.n_head) * hd];
        if (!qn.empty() && !c.qk_norm_full) {
          rmsnorm_row(vv, hh < c.n_head ? qn.data() : kn.data(), hd, c.eps, head);
          std::memcpy(vv, head, sizeof(float) * hd);
        }
        if (rotate) rope(vv, c.rope_dims, cs, sn, c);
      }
    }
    for (size_t i : order) {
      const Model::BatchSeq& s = seqs[i];
      const float* ks = &k[row0[i] * Dkv];
      const float* vs = &v[row0[i] * Dkv];
      if (observe) observe(kl, s.pos, s.n, ks, vs);
      // A ring (window layer, protected recent tokens) takes a few tokens a step.
      const int ring_step = s.cache->layout().append_step(kl);
      const int step = ring_step > 0 ? ring_step : s.n;
      for (int j = 0; j < s.n; j += step) {
        const int m = std::min(step, s.n - j);
        AttentionArgs a;
        a.q = &q[(row0[i] + j) * Dq];
        a.n_q = m;
        a.n_q_heads = c.n_head;
        a.n_kv_heads = c.n_head_kv;
        a.d = hd;
        a.causal_offset = s.pos + j;
        a.window = W;
        a.scale = c.attn_scale;
        a.sinks = L.sinks.empty() ? nullptr : L.sinks.data();
        a.threads = threads;
        a.out = &att[(row0[i] + j) * Dq];
        Status st = s.cache->attend_step(kl, s.pos + j, m, ks + size_t(j) * Dkv, vs + size_t(j) * Dkv, a);
        if (!st.ok()) return st;
      }
    }
    if (c.attn_gate)
      for (size_t e = 0; e < att.size(); ++e) att[e] *= 1.0f / (1.0f + std::exp(-gate[e]));
    mm(L.wo, att.data(), tmp.data());
    if (L.bo.rows) {  // the output projection's bias
      dequantize_row(L.bo, 0, wbuf.data());
      for (int t = 0; t < n; ++t)
        for (int i = 0; i < c.n_embd; ++i) tmp[size_t(t) * c.n_embd + i] += wbuf[i];
    }
    return Status::Ok();
  }

  // A Gated DeltaNet layer (qwen35): projections over every row, then the
  // recurrence per sequence on its state, then the output projection.
  Status delta_layer(int l, int si) {
    const LayerWeights& L = M.layers_[l];
    const DeltaNetShape sh = c.delta_shape();
    const int channels = sh.channels(), Dv = sh.v_heads * sh.v_dim;
    std::vector<float> qkv(size_t(n) * channels), z(size_t(n) * Dv), b(size_t(n) * sh.v_heads),
        al(size_t(n) * sh.v_heads), o(size_t(n) * Dv);
    rmsnorm_rows(x.data(), n, L.attn_norm, c.n_embd, c.eps, h.data(), threads);
    mm(L.wqkv, h.data(), qkv.data());
    mm(L.wz, h.data(), z.data());
    mm(L.w_beta, h.data(), b.data());
    mm(L.w_alpha, h.data(), al.data());
    for (size_t i : order) {
      const Model::BatchSeq& s = seqs[i];
      const size_t r = row0[i];
      delta_net(sh, L.delta, s.n, &qkv[r * channels], &z[r * Dv], &b[r * sh.v_heads], &al[r * sh.v_heads], c.eps,
                s.cache->state(si), &o[r * Dv], threads);
    }
    mm(L.wo, o.data(), tmp.data());
    return Status::Ok();
  }

  void ffn_layer(int l) {
    const LayerWeights& L = M.layers_[l];
    pre_norm(L.ffn_norm);
    if (L.moe.n_used > 0) {  // experts, grouped as the matrix products above
      if (n_single > 0)
        moe_ffn(L.moe, h.data(), n_single, tmp.data(),
                [&](const Matrix& w, const float* xi, int m, float* y) { matmul_tokens(w, xi, m, y, threads); });
      for (size_t k = n_single; k < order.size(); ++k) {
        const size_t i = order[k];
        moe_ffn(L.moe, &h[row0[i] * c.n_embd], seqs[i].n, &tmp[row0[i] * c.n_embd],
                [&](const Matrix& w, const float* xi, int m, float* y) { matmul(w, xi, m, y, threads); });
      }
      return;
    }
    const int ff = static_cast<int>(L.w_gate.rows);
    sg.resize(size_t(n) * ff);
    su.resize(size_t(n) * ff);
    std::vector<float>&g = sg, &u = su;
    mm_same_input(h.data(), {{&L.w_gate, g.data()}, {&L.w_up, u.data()}});
    const int64_t n_g = static_cast<int64_t>(g.size());
    if (c.gelu) {  // GeGLU, GELU's tanh form (llama.cpp's ggml_gelu)
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelRows)
      for (int64_t i = 0; i < n_g; ++i) {
        const float a = g[i];
        g[i] = 0.5f * a * (1.0f + std::tanh(0.7978845608028654f * (a + 0.044715f * a * a * a))) * u[i];
      }
    } else {
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelRows)
      for (int64_t i = 0; i < n_g; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];  // SwiGLU
    }
    mm(L.w_down, g.data(), tmp.data());
  }

  // Granite's logit scale, Gemma's soft cap.
  void softcap(float* lg, size_t count) const {
    if (c.logit_scale != 0.0f)
      for (size_t i = 0; i < count; ++i) lg[i] /= c.logit_scale;
    if (c.final_softcap > 0.0f)
      for (size_t i = 0; i < count; ++i) lg[i] = c.final_softcap * std::tanh(lg[i] / c.final_softcap);
  }

  Status output(bool all_logits) {
    const int E = c.n_embd;
    if (all_logits) {  // every token of the one sequence (perplexity)
      rmsnorm_rows(x.data(), n, M.out_norm_, E, c.eps, h.data(), threads);
      matmul(M.output_, h.data(), n, seqs[0].logits, threads);
      softcap(seqs[0].logits, size_t(n) * c.n_vocab);
      for (int t = 0; t < n; ++t)
        if (Status st = check_logits(seqs[0].logits + size_t(t) * c.n_vocab, c.n_vocab, seqs[0].pos + t); !st.ok())
          return st;
      return Status::Ok();
    }
    // The last token of each sequence that wants logits, as one-token rows.
    std::vector<size_t> want;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].logits) want.push_back(i);
    if (want.empty()) return Status::Ok();
    for (size_t j = 0; j < want.size(); ++j) {
      const size_t last = row0[want[j]] + seqs[want[j]].n - 1;
      rmsnorm(&x[last * E], M.out_norm_, E, c.eps, &h[j * E], wbuf);
    }
    std::vector<float> lg(want.size() * size_t(c.n_vocab));
    matmul_tokens(M.output_, h.data(), static_cast<int>(want.size()), lg.data(), threads);
    softcap(lg.data(), lg.size());
    for (size_t j = 0; j < want.size(); ++j) {
      const Model::BatchSeq& s = seqs[want[j]];
      std::memcpy(s.logits, &lg[j * c.n_vocab], sizeof(float) * c.n_vocab);
      Status st = check_logits(s.logits, c.n_vocab, s.pos + s.n - 1);
      if (s.nonfinite_logits) *s.nonfinite_logits = !st.ok();
      else if (!st.ok()) return st;
    }
    return Status::Ok();
  }
};

Status Model::run(const std::vector<BatchSeq>& seqs, int threads, bool all_logits, const KvObserver& observe) const {
  ForwardPass f(*this, seqs, threads);
  if (Status s = f.plan(); !s.ok()) return s;
  if (all_logits && seqs.size() != 1) return Status::Error("forward: all logits need a single sequence");
  f.embed();
  for (int l = 0, si = 0; l < cfg_.n_layer; ++l) {
    const int kl = cfg_.kv_layer[l];
    Status s = kl >= 0 ? f.attention_layer(l, kl, observe) : f.delta_layer(l, si++);
    if (!s.ok()) return s;
    f.residual(layers_[l].post_attn_norm);
    f.ffn_layer(l);
    f.residual(layers_[l].post_ffn_norm);
  }
  return f.output(all_logits);
}

}  // namespace tkv
