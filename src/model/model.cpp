#include "model/model.h"

#include "util/hash.h"

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

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
// The widest head the loader accepts (Model::from_file checks head_dim).
constexpr int kMaxHeadDim = 1024;

// rmsnorm of n_rows rows of width n, the weight dequantized once.
void rmsnorm_rows(const float* x, int n_rows, const Matrix& w, int n, float eps, float* out, int threads) {
  std::vector<float> wv(n);
  dequantize_row(w, 0, wv.data());
#pragma omp parallel for num_threads(threads) schedule(static) if (n_rows >= kParallelRows)
  for (int t = 0; t < n_rows; ++t) rmsnorm_row(x + size_t(t) * n, wv.data(), n, eps, out + size_t(t) * n);
}

// The rotation angles of one position: cos and sin of p * base^(-2i/dims)
// (divided by factors[i], LongRoPE, when given; both scaled by
// rope_attn_factor then).
void rope_angles(int dims, int pos, const ModelConfig& c, const float* factors, float* cs, float* sn) {
  const float p = static_cast<float>(pos) / c.rope_scale;
  for (int i = 0; i < dims / 2; ++i) {
    float theta = p * std::pow(c.rope_base, -2.0f * i / dims);
    if (factors) theta /= factors[i];
    cs[i] = std::cos(theta);
    sn[i] = std::sin(theta);
    if (factors) {
      cs[i] *= c.rope_attn_factor;
      sn[i] *= c.rope_attn_factor;
    }
  }
}

// Rows r0 .. r0 + n of a matrix (a part of a fused tensor).
Matrix row_range(const Matrix& m, int64_t r0, int64_t n) {
  Matrix v = m;
  v.data = m.data + r0 * m.row_bytes;
  v.rows = n;
  return v;
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

Expected<std::unique_ptr<Model>> Model::load(const std::string& path) {
  auto f = gguf::File::open(path);
  if (!f) return f.status();
  return from_file(std::move(*f));
}

Expected<std::unique_ptr<Model>> Model::from_file(std::shared_ptr<const gguf::File> file) {
  if (!file) return Status::Error("model: no GGUF file");
  const std::string& path = file->path();
  auto m = std::unique_ptr<Model>(new Model());
  m->file_ = std::move(file);
  const gguf::File& g = *m->file_;
  auto arch = g.get_string("general.architecture");
  if (!arch) return arch.status();
  ModelConfig& c = m->cfg_;
  c.arch = *arch;
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "phi3" && c.arch != "qwen3moe")
    return Status::Error(path + ": architecture '" + c.arch + "' is not supported (llama, qwen2, qwen3, phi3, qwen3moe)");
  const bool moe = c.arch == "qwen3moe";
  auto need = [&](const std::string& key) -> Expected<int> {
    auto v = g.get_uint(c.arch + "." + key);
    if (!v) return v.status();
    if (*v == 0 || *v > (1u << 24)) return Status::Error(path + ": " + c.arch + "." + key + " = " + std::to_string(*v) + " is out of range");
    return static_cast<int>(*v);
  };
  for (auto [key, dst] : {std::pair<const char*, int*>{"block_count", &c.n_layer}, {"embedding_length", &c.n_embd},
                          {"attention.head_count", &c.n_head}, {"feed_forward_length", &c.n_ff}}) {
    if (moe && std::string(key) == "feed_forward_length") continue;  // the experts' own width below
    auto v = need(key);
    if (!v) return v.status();
    *dst = *v;
  }
  // Optional counts, checked as read (a wrapped int could pass the checks below).
  auto optional = [&](const std::string& key, uint64_t fallback, uint64_t lo, uint64_t hi) -> Expected<int> {
    const uint64_t v = g.get_uint_or(c.arch + "." + key, fallback);
    if (v < lo || v > hi)
      return Status::Error(path + ": " + c.arch + "." + key + " = " + std::to_string(v) + " is out of range (" +
                           std::to_string(lo) + ".." + std::to_string(hi) + ")");
    return static_cast<int>(v);
  };
  if (moe) {  // the experts: how many, how many per token, their width
    auto ne = need("expert_count");
    if (!ne) return ne.status();
    if (*ne > 4096) return Status::Error(path + ": " + c.arch + ".expert_count = " + std::to_string(*ne) + " is out of range");
    c.n_expert = *ne;
    auto nu = need("expert_used_count");
    if (!nu) return nu.status();
    if (*nu > c.n_expert)
      return Status::Error(path + ": " + c.arch + ".expert_used_count = " + std::to_string(*nu) + " is more than the " +
                           std::to_string(c.n_expert) + " experts");
    c.n_expert_used = *nu;
    c.n_ff = static_cast<int>(g.get_uint_or(c.arch + ".feed_forward_length", 0));
    auto nf = optional("expert_feed_forward_length", c.n_ff > 0 ? c.n_ff / c.n_expert_used : 0, 1, 1u << 20);
    if (!nf) return nf.status();
    c.n_ff_exp = *nf;
    if (c.n_ff <= 0 || c.n_ff > (1 << 24)) c.n_ff = c.n_ff_exp;
    c.expert_weights_scale = static_cast<float>(g.get_float_or(c.arch + ".expert_weights_scale", 0.0));
  }
  auto hkv = optional("attention.head_count_kv", c.n_head, 1, uint64_t(c.n_head));
  if (!hkv) return hkv.status();
  c.n_head_kv = *hkv;
  auto hd = optional("attention.key_length", c.n_embd / c.n_head, 2, 1024);
  if (!hd) return hd.status();
  c.head_dim = *hd;
  auto ctx = optional("context_length", 2048, 1, 1u << 24);
  if (!ctx) return ctx.status();
  c.n_ctx_train = *ctx;
  c.eps = static_cast<float>(g.get_float_or(c.arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = static_cast<float>(g.get_float_or(c.arch + ".rope.freq_base", 10000.0));
  auto rd = optional("rope.dimension_count", c.head_dim, 0, uint64_t(c.head_dim));
  if (!rd) return rd.status();
  c.rope_dims = *rd;
  c.rope_neox = c.arch != "llama";
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe";
  const std::string scaling = g.get_string_or(c.arch + ".rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_scale = static_cast<float>(g.get_float_or(c.arch + ".rope.scaling.factor", 1.0));
  } else if (scaling != "none") {
    return Status::Error(path + ": rope scaling '" + scaling + "' is not supported yet (none, linear)");
  }
  // Phi-3's LongRoPE: the original context the factors switch at, and the
  // attention factor (its converter writes both with the factor tensors).
  auto orig = optional("rope.scaling.original_context_length", 0, 0, 1u << 24);
  if (!orig) return orig.status();
  c.n_ctx_orig = *orig;
  c.rope_attn_factor = static_cast<float>(g.get_float_or(c.arch + ".rope.scaling.attn_factor", 1.0));
  if (!(c.rope_attn_factor > 0.0f && c.rope_attn_factor < 100.0f))
    return Status::Error(path + ": " + c.arch + ".rope.scaling.attn_factor = " + std::to_string(c.rope_attn_factor) +
                         " is out of range");
  if (c.n_head_kv < 1 || c.n_head % c.n_head_kv != 0)
    return Status::Error(path + ": head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " + std::to_string(c.n_head_kv));
  if (c.head_dim < 2 || c.head_dim > kMaxHeadDim || c.rope_dims > c.head_dim || c.rope_dims % 2)
    return Status::Error(path + ": head dim " + std::to_string(c.head_dim) + " / rope dims " + std::to_string(c.rope_dims) + " not supported");

  auto tensor = [&](const std::string& name, int64_t cols, int64_t rows, bool optional) -> Expected<Matrix> {
    const gguf::Tensor* t = g.tensor(name);
    if (!t) {
      if (optional) return Matrix{};
      return Status::Error(path + ": missing tensor '" + name + "'");
    }
    auto mat = matrix_from(*t, path);
    if (!mat) return mat.status();
    if (mat->cols != cols || mat->rows != rows)
      return Status::Error(path + ": tensor '" + name + "' is " + std::to_string(mat->cols) + " x " + std::to_string(mat->rows) +
                           ", expected " + std::to_string(cols) + " x " + std::to_string(rows));
    m->weight_bytes_ += t->n_bytes;
    return *mat;
  };
  // A 3-D tensor [cols, rows, n] as n matrices (a mixture's experts).
  auto experts = [&](const std::string& name, int64_t cols, int64_t rows, int64_t n) -> Expected<std::vector<Matrix>> {
    const gguf::Tensor* t = g.tensor(name);
    if (!t) return Status::Error(path + ": missing tensor '" + name + "'");
    if (t->dims.size() != 3 || int64_t(t->dims[0]) != cols || int64_t(t->dims[1]) != rows || int64_t(t->dims[2]) != n)
      return Status::Error(path + ": tensor '" + name + "' is not " + std::to_string(cols) + " x " + std::to_string(rows) +
                           " x " + std::to_string(n) + " (the experts' shape)");
    gguf::Tensor one = *t;  // one expert's matrix, for the type and shape checks
    one.dims = {t->dims[0], t->dims[1]};
    auto mat = matrix_from(one, path);
    if (!mat) return mat.status();
    std::vector<Matrix> out;
    for (int64_t e = 0; e < n; ++e) out.push_back(row_range(*mat, e * rows, rows));
    m->weight_bytes_ += t->n_bytes;
    return out;
  };
  const gguf::Tensor* emb = g.tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) return Status::Error(path + ": missing or malformed tensor 'token_embd.weight'");
  // Checked before any table is sized by it (the largest vocabularies in use
  // are ~262K tokens).
  if (emb->dims[1] > kMaxVocab)
    return Status::Error(path + ": token_embd.weight has " + std::to_string(emb->dims[1]) + " rows (tokens), more than " +
                         std::to_string(kMaxVocab) + " supported");
  c.n_vocab = static_cast<int>(emb->dims[1]);
  auto tok = Tokenizer::from_gguf(g);
  if (!tok) return tok.status();
  if (tok->n_vocab() != c.n_vocab)
    return Status::Error(path + ": the vocabulary has " + std::to_string(tok->n_vocab()) + " tokens but token_embd.weight has " + std::to_string(c.n_vocab));
  m->tok_ = std::make_unique<Tokenizer>(std::move(*tok));
  const int E = c.n_embd, Dq = c.n_head * c.head_dim, Dkv = c.n_head_kv * c.head_dim;
#define TKV_LOAD(dst, name, cols, rows, opt)      \
  {                                               \
    auto r_ = tensor(name, cols, rows, opt);      \
    if (!r_) return r_.status();                  \
    dst = *r_;                                    \
  }
  TKV_LOAD(m->tok_embd_, "token_embd.weight", E, c.n_vocab, false);
  TKV_LOAD(m->out_norm_, "output_norm.weight", E, 1, false);
  TKV_LOAD(m->output_, "output.weight", E, c.n_vocab, true);
  if (m->output_.rows == 0) m->output_ = m->tok_embd_;  // tied embeddings
  m->layers_.resize(c.n_layer);
  for (int i = 0; i < c.n_layer; ++i) {
    Layer& L = m->layers_[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    TKV_LOAD(L.attn_norm, p + "attn_norm.weight", E, 1, false);
    if (g.tensor(p + "attn_qkv.weight")) {  // Phi-3: Q, K and V rows in one tensor
      Matrix qkv;
      TKV_LOAD(qkv, p + "attn_qkv.weight", E, Dq + 2 * Dkv, false);
      L.wq = row_range(qkv, 0, Dq);
      L.wk = row_range(qkv, Dq, Dkv);
      L.wv = row_range(qkv, Dq + Dkv, Dkv);
    } else {
      TKV_LOAD(L.wq, p + "attn_q.weight", E, Dq, false);
      TKV_LOAD(L.wk, p + "attn_k.weight", E, Dkv, false);
      TKV_LOAD(L.wv, p + "attn_v.weight", E, Dkv, false);
    }
    TKV_LOAD(L.wo, p + "attn_output.weight", Dq, E, false);
    TKV_LOAD(L.ffn_norm, p + "ffn_norm.weight", E, 1, false);
    if (moe) {  // the router and every expert's three matrices (one 3-D tensor each)
      TKV_LOAD(L.moe.router, p + "ffn_gate_inp.weight", E, c.n_expert, false);
      L.moe.n_used = c.n_expert_used;
      L.moe.weights_scale = c.expert_weights_scale;
      for (auto [name, dst, cols, rows] :
           {std::tuple<const char*, std::vector<Matrix>*, int, int>{"ffn_gate_exps.weight", &L.moe.gate, E, c.n_ff_exp},
            {"ffn_up_exps.weight", &L.moe.up, E, c.n_ff_exp},
            {"ffn_down_exps.weight", &L.moe.down, c.n_ff_exp, E}}) {
        auto ex = experts(p + name, cols, rows, c.n_expert);
        if (!ex) return ex.status();
        *dst = std::move(*ex);
      }
    } else if (c.arch == "phi3") {  // gate rows then up rows in ffn_up (llama.cpp's fused SwiGLU: silu of the first half)
      Matrix up2;
      TKV_LOAD(up2, p + "ffn_up.weight", E, 2 * c.n_ff, false);
      L.w_gate = row_range(up2, 0, c.n_ff);
      L.w_up = row_range(up2, c.n_ff, c.n_ff);
    } else {
      TKV_LOAD(L.w_gate, p + "ffn_gate.weight", E, c.n_ff, false);
      TKV_LOAD(L.w_up, p + "ffn_up.weight", E, c.n_ff, false);
    }
    if (!moe) TKV_LOAD(L.w_down, p + "ffn_down.weight", c.n_ff, E, false);
    TKV_LOAD(L.bq, p + "attn_q.bias", Dq, 1, true);
    TKV_LOAD(L.bk, p + "attn_k.bias", Dkv, 1, true);
    TKV_LOAD(L.bv, p + "attn_v.bias", Dkv, 1, true);
    TKV_LOAD(L.q_norm, p + "attn_q_norm.weight", c.head_dim, 1, !c.qk_norm);
    TKV_LOAD(L.k_norm, p + "attn_k_norm.weight", c.head_dim, 1, !c.qk_norm);
  }
  // LongRoPE factors: both or neither, one per rotated pair, finite and > 0.
  Matrix fl, fs;
  TKV_LOAD(fl, "rope_factors_long.weight", c.rope_dims / 2, 1, true);
  TKV_LOAD(fs, "rope_factors_short.weight", c.rope_dims / 2, 1, true);
#undef TKV_LOAD
  if ((fl.rows == 0) != (fs.rows == 0))
    return Status::Error(path + ": rope_factors_long.weight and rope_factors_short.weight come together; one is missing");
  if (fl.rows) {
    if (c.n_ctx_orig == 0)
      return Status::Error(path + ": rope factors without " + c.arch + ".rope.scaling.original_context_length");
    for (auto [mat, dst] : {std::pair<const Matrix*, std::vector<float>*>{&fl, &m->rope_long_}, {&fs, &m->rope_short_}}) {
      dst->resize(static_cast<size_t>(c.rope_dims / 2));
      dequantize_row(*mat, 0, dst->data());
      for (float f : *dst)
        if (!(f > 0.0f) || !std::isfinite(f))
          return Status::Error(path + ": a rope factor is " + std::to_string(f) + " (factors must be finite and > 0)");
    }
  }
  // Copy the weights out of the file mapping onto huge pages: decode streams
  // them all once per token, and 4 KiB pages cost TLB misses at that speed.
  std::vector<Matrix*> mats = {&m->tok_embd_, &m->out_norm_, &m->output_};
  for (auto& L : m->layers_) {
    for (Matrix* x : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down, &L.bq,
                      &L.bk, &L.bv, &L.q_norm, &L.k_norm, &L.moe.router})
      mats.push_back(x);
    for (auto* v : {&L.moe.gate, &L.moe.up, &L.moe.down})
      for (Matrix& x : *v) mats.push_back(&x);
  }
  size_t total = 0;
  for (const Matrix* x : mats)
    if (x->rows) total += (x->row_bytes * x->rows + 63) / 64 * 64;
  m->weights_ = HugeBuffer(total);
  std::map<const uint8_t*, uint8_t*> moved;  // tied output shares the embedding copy
  size_t off = 0;
  for (Matrix* x : mats) {
    if (!x->rows) continue;
    auto it = moved.find(x->data);
    if (it != moved.end()) {
      x->data = it->second;
      continue;
    }
    uint8_t* dst = m->weights_.data() + off;
    std::memcpy(dst, x->data, x->row_bytes * x->rows);
    moved[x->data] = dst;
    x->data = dst;
    off += (x->row_bytes * x->rows + 63) / 64 * 64;
  }
  return m;
}

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

Status Model::run(const std::vector<BatchSeq>& seqs, int threads, bool all_logits, const KvObserver& observe) const {
  const ModelConfig& c = cfg_;
  if (seqs.empty()) return Status::Error("forward: no sequences");
  // Rows: the one-token sequences first (one matmul_tokens group), then each
  // longer sequence's rows (one matmul each).
  std::vector<size_t> order, row0(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    if (seqs[i].n == 1) order.push_back(i);
  const int n_single = static_cast<int>(order.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    if (seqs[i].n != 1) order.push_back(i);
  int n = 0;
  for (size_t i : order) {
    const BatchSeq& s = seqs[i];
    if (s.n < 1 || !s.cache || !s.tokens) return Status::Error("forward: sequence " + std::to_string(i) + " has no tokens");
    for (int t = 0; t < s.n; ++t)
      if (s.tokens[t] < 0 || s.tokens[t] >= c.n_vocab)
        return Status::Error("forward: token id " + std::to_string(s.tokens[t]) + " is outside the vocabulary (" +
                             std::to_string(c.n_vocab) + ")");
    row0[i] = static_cast<size_t>(n);
    n += s.n;
  }
  if (all_logits && seqs.size() != 1) return Status::Error("forward: all logits need a single sequence");
  // y = W x over every row, grouped as above.
  auto mm = [&](const Matrix& w, const float* x, float* y) {
    if (n_single > 0) matmul_tokens(w, x, n_single, y, threads);
    for (size_t k = n_single; k < order.size(); ++k) {
      const size_t i = order[k];
      matmul(w, x + row0[i] * w.cols, seqs[i].n, y + row0[i] * w.rows, threads);
    }
  };
  const int E = c.n_embd, hd = c.head_dim, Dq = c.n_head * hd, Dkv = c.n_head_kv * hd;
  std::vector<float> x(size_t(n) * E), h(size_t(n) * E), q(size_t(n) * Dq), k(size_t(n) * Dkv), v(size_t(n) * Dkv);
  std::vector<float> att(size_t(n) * Dq), tmp(size_t(n) * E), g(size_t(n) * c.n_ff), u(size_t(n) * c.n_ff), wbuf;
  for (size_t i : order)
    for (int t = 0; t < seqs[i].n; ++t) dequantize_row(tok_embd_, seqs[i].tokens[t], &x[(row0[i] + t) * E]);
  auto add_bias = [&](std::vector<float>& y, const Matrix& b, int width) {
    if (b.rows == 0) return;
    dequantize_row(b, 0, wbuf.data());
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < width; ++i) y[size_t(t) * width + i] += wbuf[i];
  };
  // Each row's position (its sequence's start + its index there), and its
  // LongRoPE factors: long ones for a sequence whose cache holds more than
  // the original context (as llama.cpp chooses by context size).
  std::vector<int> row_pos(n);
  std::vector<const float*> row_factors(n, nullptr);
  for (size_t i : order)
    for (int t = 0; t < seqs[i].n; ++t) {
      row_pos[row0[i] + t] = seqs[i].pos + t;
      if (!rope_long_.empty())
        row_factors[row0[i] + t] = seqs[i].cache->capacity() > c.n_ctx_orig ? rope_long_.data() : rope_short_.data();
    }
  const int64_t n_x = static_cast<int64_t>(x.size());
  auto add_rows = [&](float* dst, const float* src) {  // the residual connection
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelRows)
    for (int64_t i = 0; i < n_x; ++i) dst[i] += src[i];
  };
  std::vector<float> qn, kn;
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    rmsnorm_rows(x.data(), n, L.attn_norm, E, c.eps, h.data(), threads);
    mm(L.wq, h.data(), q.data());
    mm(L.wk, h.data(), k.data());
    mm(L.wv, h.data(), v.data());
    wbuf.resize(std::max(Dq, E));
    add_bias(q, L.bq, Dq);
    add_bias(k, L.bk, Dkv);
    add_bias(v, L.bv, Dkv);
    // Q/K norms and rotary positions, per row.
    if (c.qk_norm) {
      qn.resize(hd);
      kn.resize(hd);
      dequantize_row(L.q_norm, 0, qn.data());
      dequantize_row(L.k_norm, 0, kn.data());
    }
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelRows)
    for (int r = 0; r < n; ++r) {
      float head[kMaxHeadDim], cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
      rope_angles(c.rope_dims, row_pos[r], c, row_factors[r], cs, sn);
      for (int hh = 0; hh < c.n_head + c.n_head_kv; ++hh) {
        float* v = hh < c.n_head ? &q[size_t(r) * Dq + hh * hd] : &k[size_t(r) * Dkv + (hh - c.n_head) * hd];
        if (c.qk_norm) {
          rmsnorm_row(v, hh < c.n_head ? qn.data() : kn.data(), hd, c.eps, head);
          std::memcpy(v, head, sizeof(float) * hd);
        }
        rope(v, c.rope_dims, cs, sn, c);
      }
    }
    for (size_t i : order) {
      const BatchSeq& s = seqs[i];
      const float* ks = &k[row0[i] * Dkv];
      const float* vs = &v[row0[i] * Dkv];
      if (observe) observe(l, s.pos, s.n, ks, vs);
      Status st = s.cache->append(l, s.pos, s.n, ks, vs);
      if (!st.ok()) return st;
      AttentionArgs a;
      a.q = &q[row0[i] * Dq];
      a.n_q = s.n;
      a.n_q_heads = c.n_head;
      a.n_kv = s.pos + s.n;
      a.n_kv_heads = c.n_head_kv;
      a.d = hd;
      a.k = s.cache->k_rows(l);
      a.v = s.cache->v_rows(l);
      a.causal_offset = s.pos;
      a.mu_k = s.cache->mu_k(l);
      a.mu_v = s.cache->mu_v(l);
      a.threads = threads;
      a.out = &att[row0[i] * Dq];
      st = attention(a);
      if (!st.ok()) return st;
    }
    mm(L.wo, att.data(), tmp.data());
    add_rows(x.data(), tmp.data());
    rmsnorm_rows(x.data(), n, L.ffn_norm, E, c.eps, h.data(), threads);
    if (L.moe.n_used > 0) {  // experts, grouped as the matrix products above
      if (n_single > 0)
        moe_ffn(L.moe, h.data(), n_single, tmp.data(),
                [&](const Matrix& w, const float* xi, int m, float* y) { matmul_tokens(w, xi, m, y, threads); });
      for (size_t k = n_single; k < order.size(); ++k) {
        const size_t i = order[k];
        moe_ffn(L.moe, &h[row0[i] * E], seqs[i].n, &tmp[row0[i] * E],
                [&](const Matrix& w, const float* xi, int m, float* y) { matmul(w, xi, m, y, threads); });
      }
      add_rows(x.data(), tmp.data());
      continue;
    }
    mm(L.w_gate, h.data(), g.data());
    mm(L.w_up, h.data(), u.data());
    const int64_t n_g = static_cast<int64_t>(g.size());
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelRows)
    for (int64_t i = 0; i < n_g; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];  // SwiGLU
    mm(L.w_down, g.data(), tmp.data());
    add_rows(x.data(), tmp.data());
  }
  if (all_logits) {  // every token of the one sequence (perplexity)
    rmsnorm_rows(x.data(), n, out_norm_, E, c.eps, h.data(), threads);
    matmul(output_, h.data(), n, seqs[0].logits, threads);
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
    rmsnorm(&x[last * E], out_norm_, E, c.eps, &h[j * E], wbuf);
  }
  std::vector<float> lg(want.size() * size_t(c.n_vocab));
  matmul_tokens(output_, h.data(), static_cast<int>(want.size()), lg.data(), threads);
  for (size_t j = 0; j < want.size(); ++j) {
    const BatchSeq& s = seqs[want[j]];
    std::memcpy(s.logits, &lg[j * c.n_vocab], sizeof(float) * c.n_vocab);
    Status st = check_logits(s.logits, c.n_vocab, s.pos + s.n - 1);
    if (s.nonfinite_logits) *s.nonfinite_logits = !st.ok();
    else if (!st.ok()) return st;
  }
  return Status::Ok();
}

uint64_t Model::fingerprint() const {
  uint64_t h = fnv1a(cfg_.arch.data(), cfg_.arch.size());
  const int dims[] = {cfg_.n_layer, cfg_.n_embd, cfg_.n_head, cfg_.n_head_kv, cfg_.head_dim, cfg_.n_ff, cfg_.n_vocab};
  h = fnv1a(dims, sizeof(dims), h);
  for (const auto& t : file_->tensors()) {
    h = fnv1a(t.name.data(), t.name.size(), h);
    h = fnv1a(t.dims.data(), t.dims.size() * 8, h);
    h = fnv1a(&t.type, 4, h);
    // A sample of the weights themselves, so two random models differ.
    h = fnv1a(t.data, std::min<uint64_t>(t.n_bytes, 256), h);
  }
  return h;
}

}  // namespace tkv
