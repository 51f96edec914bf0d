// Model loading: the metadata every architecture shares, the architecture's
// own part from its table entry (model/arch.h), the embeddings, vocabulary
// and output, then every weight copied onto huge pages.
#include "model/model.h"

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "model/arch.h"
#include "model/tokenizer_gguf.h"
#include "util/hash.h"

namespace tkv {

KvShape ModelConfig::kv_shape() const {
  KvShape s(n_kv_layer(), n_head_kv, head_dim);
  for (int l = 0; l < n_layer; ++l) {
    const bool has_kv = kv_layer.empty() || kv_layer[l] >= 0;
    if (has_kv && !window.empty()) s.window.push_back(window[l]);
    if (!has_kv) s.state_floats.push_back(ssm_state_floats());
  }
  bool any = false;
  for (int w : s.window) any |= w > 0;
  if (!any) s.window.clear();
  return s;
}

int ModelConfig::n_kv_layer() const {
  if (kv_layer.empty()) return n_layer;
  int n = 0;
  for (int k : kv_layer) n += k >= 0;
  return n;
}

std::string ModelConfig::describe() const {
  int full = 0, recurrent = 0;
  std::map<int, int> windows;
  for (int l = 0; l < n_layer; ++l) {
    if (!kv_layer.empty() && kv_layer[l] < 0) ++recurrent;
    else if (!window.empty() && window[l] > 0) ++windows[window[l]];
    else ++full;
  }
  std::string s = arch + ", " + std::to_string(n_layer) + " layers: " + std::to_string(full) + " full attention";
  for (auto [w, count] : windows)
    s += ", " + std::to_string(count) + " sliding-window (" + std::to_string(w) + " tokens)";
  if (recurrent)
    s += ", " + std::to_string(recurrent) + " Gated DeltaNet (" + std::to_string(ssm_v_heads) + " value heads of " +
         std::to_string(ssm_k_dim) + "x" + std::to_string(ssm_v_dim) + " state, " +
         std::to_string(ssm_state_floats() * 4 / 1024) + " KiB per sequence each)";
  s += "; " + std::to_string(n_head) + "/" + std::to_string(n_head_kv) + " heads of " + std::to_string(head_dim) +
       ", rotary on " + std::to_string(rope_dims);
  if (n_expert > 0)
    s += "; " + std::to_string(n_expert_used) + " of " + std::to_string(n_expert) + " experts" +
         (n_ff_shexp > 0 ? " + a shared one" : "");
  return s;
}

Matrix row_range(const Matrix& m, int64_t r0, int64_t n) {
  Matrix v = m;
  v.data = m.data + r0 * m.row_bytes;
  v.rows = n;
  return v;
}

Expected<int> ArchLoader::need(const std::string& key) const {
  auto v = g.get_uint(c.arch + "." + key);
  if (!v) return v.status();
  if (*v == 0 || *v > (1u << 24)) return error(c.arch + "." + key + " = " + std::to_string(*v) + " is out of range");
  return static_cast<int>(*v);
}

// Checked as read: a wrapped int could pass the checks after.
Expected<int> ArchLoader::optional(const std::string& key, uint64_t fallback, uint64_t lo, uint64_t hi) const {
  const uint64_t v = g.get_uint_or(c.arch + "." + key, fallback);
  if (v < lo || v > hi)
    return error(c.arch + "." + key + " = " + std::to_string(v) + " is out of range (" + std::to_string(lo) + ".." +
                 std::to_string(hi) + ")");
  return static_cast<int>(v);
}

Expected<Matrix> ArchLoader::tensor(const std::string& name, int64_t cols, int64_t rows, bool opt) const {
  const gguf::Tensor* t = g.tensor(name);
  if (!t) {
    if (opt) return Matrix{};
    return error("missing tensor '" + name + "'");
  }
  auto mat = matrix_from(*t, path);
  if (!mat) return mat.status();
  if (mat->cols != cols || mat->rows != rows)
    return error("tensor '" + name + "' is " + std::to_string(mat->cols) + " x " + std::to_string(mat->rows) +
                 ", expected " + std::to_string(cols) + " x " + std::to_string(rows));
  m.weight_bytes_ += t->n_bytes;
  mark_used(t);
  return *mat;
}

Status ArchLoader::load(Matrix& dst, int il, const std::string& name, int64_t cols, int64_t rows, bool opt) const {
  auto t = tensor("blk." + std::to_string(il) + "." + name, cols, rows, opt);
  if (!t) return t.status();
  dst = *t;
  return Status::Ok();
}

Expected<std::vector<Matrix>> ArchLoader::experts(const std::string& name, int64_t cols, int64_t rows, int64_t n) const {
  const gguf::Tensor* t = g.tensor(name);
  if (!t) return error("missing tensor '" + name + "'");
  if (t->dims.size() != 3 || int64_t(t->dims[0]) != cols || int64_t(t->dims[1]) != rows || int64_t(t->dims[2]) != n)
    return error("tensor '" + name + "' is not " + std::to_string(cols) + " x " + std::to_string(rows) + " x " +
                 std::to_string(n) + " (the experts' shape)");
  gguf::Tensor one = *t;  // one expert's matrix, for the type and shape checks
  one.dims = {t->dims[0], t->dims[1]};
  auto mat = matrix_from(one, path);
  if (!mat) return mat.status();
  std::vector<Matrix> out;
  for (int64_t e = 0; e < n; ++e) out.push_back(row_range(*mat, e * rows, rows));
  m.weight_bytes_ += t->n_bytes;
  mark_used(t);
  return out;
}

const ArchSpec* find_arch(const std::string& name) {
  for (const ArchSpec* a : {&kArchLlama, &kArchQwen2, &kArchQwen3, &kArchPhi3, &kArchQwen3Moe, &kArchGemma3,
                            &kArchQwen35, &kArchQwen35Moe, &kArchSmolLM3, &kArchGranite, &kArchOlmo2, &kArchGptOss})
    if (name == a->name) return a;
  return nullptr;
}

std::string arch_names() {
  std::string s;
  for (const ArchSpec* a : {&kArchLlama, &kArchQwen2, &kArchQwen3, &kArchPhi3, &kArchQwen3Moe, &kArchGemma3,
                            &kArchQwen35, &kArchQwen35Moe, &kArchSmolLM3, &kArchGranite, &kArchOlmo2, &kArchGptOss})
    s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

Expected<std::unique_ptr<Model>> Model::load(const std::string& path) {
  auto f = gguf::File::open(path);
  if (!f) return f.status();
  return from_file(std::move(*f));
}

namespace {

// The keys every architecture has (llama.cpp's LLM_KV_* under "<arch>.").
Status shared_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  for (auto [key, dst] : {std::pair<const char*, int*>{"block_count", &c.n_layer}, {"embedding_length", &c.n_embd},
                          {"attention.head_count", &c.n_head}}) {
    auto v = a.need(key);
    if (!v) return v.status();
    *dst = *v;
  }
  // Required where a dense feed-forward reads it (load_ffn); a mixture's
  // experts have their own width.
  auto ff = a.optional("feed_forward_length", 0, 0, 1u << 24);
  if (!ff) return ff.status();
  c.n_ff = *ff;
  auto hkv = a.optional("attention.head_count_kv", c.n_head, 1, uint64_t(c.n_head));
  if (!hkv) return hkv.status();
  c.n_head_kv = *hkv;
  auto hd = a.optional("attention.key_length", c.n_embd / c.n_head, 2, kMaxHeadDim);
  if (!hd) return hd.status();
  c.head_dim = *hd;
  auto ctx = a.optional("context_length", 2048, 1, 1u << 24);
  if (!ctx) return ctx.status();
  c.n_ctx_train = *ctx;
  c.eps = static_cast<float>(a.g.get_float_or(c.arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = static_cast<float>(a.g.get_float_or(c.arch + ".rope.freq_base", 10000.0));
  auto rd = a.optional("rope.dimension_count", c.head_dim, 0, uint64_t(c.head_dim));
  if (!rd) return rd.status();
  c.rope_dims = *rd;
  // RoPE scaling as llama.cpp runs it: linear (positions times 1 /
  // rope.scaling.factor) or YaRN (ggml's rope_yarn: the ramp between
  // interpolated and extrapolated angles, mscale on cos and sin).
  const std::string key = c.arch + ".rope.scaling.";
  const std::string scaling = a.g.get_string_or(key + "type", "none");
  auto f32_key = [&](const std::string& name, double fallback, double lo, double hi, float* dst) -> Status {
    const gguf::Value* v = a.g.find(key + name);
    if (v && !v->is_float() && !v->is_int()) return a.error(key + name + " is not a number");
    double x = fallback;
    if (v) {
      using gguf::Type;
      const bool is_signed = v->type == Type::kI8 || v->type == Type::kI16 || v->type == Type::kI32 || v->type == Type::kI64;
      x = v->is_float() ? v->f : is_signed ? double(v->i) : double(v->u);
    }
    if (!(x >= lo && x <= hi))
      return a.error(key + name + " = " + std::to_string(x) + " is out of range (" + std::to_string(lo) + ".." +
                     std::to_string(hi) + ")");
    *dst = static_cast<float>(x);
    return Status::Ok();
  };
  // Phi-3's LongRoPE writes the original context with its factor tensors;
  // YaRN's ramp is over it (llama.cpp: n_ctx_orig_yarn, the trained context
  // when absent or 0).
  auto orig = a.optional("rope.scaling.original_context_length", 0, 0, 1u << 24);
  if (!orig) return orig.status();
  c.n_ctx_orig = *orig;
  if (Status s = f32_key("attn_factor", 1.0, 1e-3, 100.0, &c.rope_attn_factor); !s.ok()) return s;
  float attn = 1.0f;  // llama.cpp's cparams.yarn_attn_factor before the file's attn_factor
  if (scaling == "linear" || scaling == "yarn") {
    if (!a.g.find(key + "factor"))
      return a.error(key + "factor is missing (rope.scaling.type is " + scaling + ")");
    if (Status s = f32_key("factor", 0.0, 1e-3, 1e6, &c.rope_scale); !s.ok()) return s;
  } else if (scaling != "none") {
    return a.error("rope scaling '" + scaling + "' is not supported (none, linear, yarn)");
  }
  if (scaling == "yarn") {
    if (c.n_ctx_orig == 0) c.n_ctx_orig = c.n_ctx_train;
    float log_mul = 0.0f;
    for (auto [name, fallback, lo, hi, dst] :
         {std::tuple<const char*, double, double, double, float*>{"yarn_ext_factor", 1.0, 0.0, 1.0, &c.yarn_ext_factor},
          {"yarn_attn_factor", 1.0, 1e-3, 100.0, &attn},
          {"yarn_beta_fast", 32.0, 1e-3, 1e4, &c.yarn_beta_fast},
          {"yarn_beta_slow", 1.0, 1e-3, 1e4, &c.yarn_beta_slow},
          {"yarn_log_multiplier", 0.0, 0.0, 100.0, &log_mul}})
      if (Status s = f32_key(name, fallback, lo, hi, dst); !s.ok()) return s;
    if (c.yarn_ext_factor != 0.0f) {
      // llama.cpp's context: get_mscale(f, 1) / get_mscale(f, log_mul) (or
      // get_mscale(f, 1) without a multiplier), then divided by the
      // 1 + 0.1 ln f that ggml's rope multiplies in again.
      const float f = c.rope_scale;
      auto mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; };
      attn = log_mul != 0.0f ? mscale(f, 1.0f) / mscale(f, log_mul) : mscale(f, 1.0f);
      attn *= 1.0f / (1.0f + 0.1f * std::log(f));
    }
  }
  c.rope_mscale = attn * c.rope_attn_factor;
  if (c.n_head_kv < 1 || c.n_head % c.n_head_kv != 0)
    return a.error("head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                   std::to_string(c.n_head_kv));
  if (c.rope_dims > c.head_dim || c.rope_dims % 2)
    return a.error("head dim " + std::to_string(c.head_dim) + " / rope dims " + std::to_string(c.rope_dims) +
                   " not supported");
  if (!(c.eps > 0.0f && c.eps < 1.0f))
    return a.error(c.arch + ".attention.layer_norm_rms_epsilon = " + std::to_string(c.eps) + " is out of range");
  return Status::Ok();
}

// THE LIST of tensors the runtime knowingly skips: a file's tensor that no
// loader read is refused unless it is one of these (llama.cpp loads the same
// ones with TENSOR_SKIP):
//  - the multi-token-prediction blocks: qwen35's `nextn_predict_layers`
//    blocks after the ones run (blk.<il>.* with n_layer <= il < the file's
//    block_count), which only speculative decoding would use.
bool skipped_tensor(const ArchLoader& a, const std::string& name) {
  const uint64_t file_blocks = a.g.get_uint_or(a.c.arch + ".block_count", 0);
  if (name.rfind("blk.", 0) == 0) {
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos || dot == 4) return false;
    uint64_t il = 0;
    for (size_t i = 4; i < dot; ++i) {
      if (name[i] < '0' || name[i] > '9' || il > (1u << 24)) return false;
      il = il * 10 + uint64_t(name[i] - '0');
    }
    return il >= uint64_t(a.c.n_layer) && il < file_blocks;  // a multi-token-prediction block
  }
  return false;
}

// Every tensor of the file was read by a loader or is on the list above;
// the others are named (a file with tensors the runtime would silently
// ignore computes something else than what it was made for).
Status check_tensors_used(const ArchLoader& a) {
  std::string names;
  size_t n = 0;
  const auto& ts = a.g.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (a.used[i] || skipped_tensor(a, ts[i].name)) continue;
    if (n < 8) names += (n ? ", '" : "'") + ts[i].name + "'";
    ++n;
  }
  if (n == 0) return Status::Ok();
  if (n > 8) names += " and " + std::to_string(n - 8) + " more";
  return a.error(std::to_string(n) + (n == 1 ? " tensor is" : " tensors are") + " not used by the " + a.c.arch +
                 " loader and not on the list of tensors turbokv knowingly skips: " + names);
}

}  // namespace

Expected<std::unique_ptr<Model>> Model::from_file(std::shared_ptr<const gguf::File> file) {
  if (!file) return Status::Error("model: no GGUF file");
  const std::string& path = file->path();
  auto m = std::unique_ptr<Model>(new Model());
  m->file_ = std::move(file);
  const gguf::File& g = *m->file_;
  auto arch_name = g.get_string("general.architecture");
  if (!arch_name) return arch_name.status();
  ModelConfig& c = m->cfg_;
  c.arch = *arch_name;
  const ArchSpec* arch = find_arch(c.arch);
  if (!arch) return Status::Error(path + ": architecture '" + c.arch + "' is not supported (" + arch_names() + ")");
  std::vector<char> used(g.tensors().size(), 0);
  const ArchLoader a{g, path, c, *m, used};
  if (Status s = shared_hparams(a); !s.ok()) return s;
  if (Status s = arch->hparams(a); !s.ok()) return s;
  if (c.window.empty()) c.window.assign(c.n_layer, 0);
  if (c.kv_layer.empty())
    for (int l = 0; l < c.n_layer; ++l) c.kv_layer.push_back(l);

  const gguf::Tensor* emb = g.tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) return Status::Error(path + ": missing or malformed tensor 'token_embd.weight'");
  // Checked before any table is sized by it (the largest vocabularies in use
  // are ~262K tokens).
  if (emb->dims[1] > kMaxVocab)
    return Status::Error(path + ": token_embd.weight has " + std::to_string(emb->dims[1]) + " rows (tokens), more than " +
                         std::to_string(kMaxVocab) + " supported");
  c.n_vocab = static_cast<int>(emb->dims[1]);
  auto tok = tokenizer_from_gguf(g);
  if (!tok) return tok.status();
  if (tok->n_vocab() != c.n_vocab)
    return Status::Error(path + ": the vocabulary has " + std::to_string(tok->n_vocab()) + " tokens but token_embd.weight has " + std::to_string(c.n_vocab));
  m->tok_ = std::make_unique<Tokenizer>(std::move(*tok));
  const int E = c.n_embd;
  for (auto [dst, name, rows, opt] : {std::tuple<Matrix*, const char*, int, bool>{&m->tok_embd_, "token_embd.weight", c.n_vocab, false},
                                      {&m->out_norm_, "output_norm.weight", 1, false},
                                      {&m->output_, "output.weight", c.n_vocab, true}}) {
    auto t = a.tensor(name, E, rows, opt);
    if (!t) return t.status();
    *dst = *t;
  }
  if (m->output_.rows == 0) m->output_ = m->tok_embd_;  // tied embeddings
  m->layers_.resize(c.n_layer);
  for (int i = 0; i < c.n_layer; ++i)
    if (Status s = arch->layer(a, i, m->layers_[i]); !s.ok()) return s;
  // LongRoPE factors: both or neither, one per rotated pair, finite and > 0.
  Matrix fl, fs;
  for (auto [dst, name] : {std::pair<Matrix*, const char*>{&fl, "rope_factors_long.weight"}, {&fs, "rope_factors_short.weight"}}) {
    auto t = a.tensor(name, c.rope_dims / 2, 1, true);
    if (!t) return t.status();
    *dst = *t;
  }
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
  // Llama 3's RoPE factors, where the architecture reads them (as llama.cpp's
  // loader): one per rotated pair, finite and > 0.
  if (c.rope_freqs && g.tensor("rope_freqs.weight")) {
    const gguf::Tensor* t = g.tensor("rope_freqs.weight");
    if (t->n_elements != uint64_t(c.rope_dims / 2) || t->dims.size() != 1)
      return Status::Error(path + ": rope_freqs.weight has " + std::to_string(t->n_elements) +
                           " factors; expected one per rotated pair, " + std::to_string(c.rope_dims / 2) +
                           " (rope.dimension_count " + std::to_string(c.rope_dims) + " / 2)");
    auto f = a.tensor("rope_freqs.weight", c.rope_dims / 2, 1);
    if (!f) return f.status();
    m->rope_freqs_.resize(static_cast<size_t>(c.rope_dims / 2));
    dequantize_row(*f, 0, m->rope_freqs_.data());
    for (size_t i = 0; i < m->rope_freqs_.size(); ++i)
      if (!(m->rope_freqs_[i] > 0.0f) || !std::isfinite(m->rope_freqs_[i]))
        return Status::Error(path + ": rope_freqs.weight[" + std::to_string(i) + "] is " +
                             std::to_string(m->rope_freqs_[i]) + " (factors must be finite and > 0)");
  }
  if (Status s = check_tensors_used(a); !s.ok()) return s;
  // Copy the weights out of the file mapping onto huge pages: decode streams
  // them all once per token, and 4 KiB pages cost TLB misses at that speed.
  std::vector<Matrix*> mats = {&m->tok_embd_, &m->out_norm_, &m->output_};
  for (auto& L : m->layers_) {
    for (Matrix* x : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down, &L.bq,
                      &L.bk, &L.bv, &L.q_norm, &L.k_norm, &L.post_attn_norm, &L.post_ffn_norm, &L.moe.router,
                      &L.wqkv, &L.wz, &L.w_beta, &L.w_alpha, &L.conv, &L.dt_bias, &L.ssm_a, &L.ssm_norm,
                      &L.moe.shared_gate, &L.moe.shared_up, &L.moe.shared_down, &L.moe.shared_router, &L.bo,
                      &L.moe.router_b})
      mats.push_back(x);
    for (auto* v : {&L.moe.gate, &L.moe.up, &L.moe.down, &L.moe.gate_b, &L.moe.up_b, &L.moe.down_b})
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

std::string Model::weight_type() const {
  std::map<std::string, uint64_t> bytes;
  for (const auto& t : file_->tensors()) bytes[t.info().name] += t.n_bytes;
  std::string best = "?";
  uint64_t most = 0;
  for (const auto& [name, b] : bytes)
    if (b > most) {
      most = b;
      best = name;
    }
  return best;
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
