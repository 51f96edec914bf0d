// The C API's caches, models, tokenizer and contexts (include/turbokv.h).
// Generation, sampling, cache files and evaluation are in capi_run.cpp.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "gguf/weight_blocks.h"

#include "capi/capi_common.h"

using namespace tkv;
using capi::fail;
using capi::guard;
using capi::null_arg;

extern "C" {

// ------------------------------------------------------------------ caches

tkv_cache_params tkv_cache_default_params(void) {
  tkv_cache_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.n_layer = p.n_kv_heads = 1;
  p.head_dim = 128;
  p.capacity = 4096;
  p.type_k = p.type_v = "tq4";
  p.mean_center = 1;
  p.mean_tokens = 64;
  p.seed = kDefaultSeed;
  return p;
}

tkv_status tkv_cache_create(const tkv_cache_params* pp, tkv_cache** out) {
  const char* fn = "tkv_cache_create";
  return guard(fn, [&] {
    if (!out) return null_arg(fn, "out");
    *out = nullptr;
    tkv_cache_params p;
    if (tkv_status s = capi::read_params(fn, "params", pp, tkv_cache_default_params(), p)) return s;
    if (p.n_layer < 1 || p.n_layer > 4096 || p.n_kv_heads < 1 || p.n_kv_heads > 4096 || p.capacity < 1 ||
        p.mean_tokens < 1)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": bad shape: n_layer " + std::to_string(p.n_layer) +
                                        ", n_kv_heads " + std::to_string(p.n_kv_heads) + ", capacity " +
                                        std::to_string(p.capacity) + ", mean_tokens " + std::to_string(p.mean_tokens));
    KvCacheOptions co;
    if (tkv_status s = capi::cache_options(fn, p.type_k, p.type_v, p.mean_center, p.preset, p.policy_path,
                                           p.n_layer, nullptr, co))
      return s;
    co.capacity = p.capacity;
    co.mean_tokens = p.mean_tokens;
    co.seed = p.seed;
    if (co.policy && (co.policy->n_layer != p.n_layer || co.policy->n_kv_heads != p.n_kv_heads ||
                      co.policy->head_dim != p.head_dim))
      return fail(TKV_ERR_FORMAT, std::string(fn) + ": the policy " + p.policy_path + " is for " +
                                      std::to_string(co.policy->n_layer) + " layers x " +
                                      std::to_string(co.policy->n_kv_heads) + " KV heads x d " +
                                      std::to_string(co.policy->head_dim) + ", not this cache's shape");
    auto c = KvCache::create(p.n_layer, p.n_kv_heads, p.head_dim, co);
    if (!c) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + c.error());
    auto h = std::make_unique<tkv_cache>();
    h->cache = std::move(*c);
    *out = h.release();
    return TKV_OK;
  });
}

void tkv_cache_free(tkv_cache* cache) { delete cache; }

tkv_status tkv_cache_append(tkv_cache* c, int32_t layer, int32_t pos, int32_t n, const float* k, size_t k_floats,
                            const float* v, size_t v_floats) {
  const char* fn = "tkv_cache_append";
  return guard(fn, [&] {
    if (!c) return null_arg(fn, "cache");
    if (!k) return null_arg(fn, "k");
    if (!v) return null_arg(fn, "v");
    KvCache& kc = *c->cache;
    if (layer < 0 || layer >= kc.n_layer())
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": layer " + std::to_string(layer) + " is outside [0, " +
                                        std::to_string(kc.n_layer()) + ")");
    if (n < 1 || pos < 0) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": n must be >= 1 and pos >= 0");
    if (int64_t(pos) + n > kc.capacity())
      return fail(TKV_ERR_MEMORY, std::string(fn) + ": positions [" + std::to_string(pos) + ", " +
                                      std::to_string(int64_t(pos) + n) + ") exceed the capacity " +
                                      std::to_string(kc.capacity()));
    const size_t need = size_t(n) * size_t(kc.n_kv_heads()) * size_t(kc.head_dim());
    if (k_floats < need || v_floats < need)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": k and v must hold " + std::to_string(need) + " floats (" +
                                        std::to_string(n) + " x " + std::to_string(kc.n_kv_heads()) + " x " +
                                        std::to_string(kc.head_dim()) + "), got " + std::to_string(k_floats) +
                                        " and " + std::to_string(v_floats));
    Status s = kc.append(layer, pos, n, k, v);
    if (!s.ok()) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + s.message());
    return TKV_OK;
  });
}

int32_t tkv_cache_n_tokens(const tkv_cache* c) { return c ? c->cache->n_tokens() : 0; }
int32_t tkv_cache_layer_tokens(const tkv_cache* c, int32_t layer) {
  return c && layer >= 0 && layer < c->cache->n_layer() ? c->cache->layer_tokens(layer) : 0;
}
size_t tkv_cache_bytes(const tkv_cache* c) { return c ? c->cache->k_bytes() + c->cache->v_bytes() : 0; }

tkv_status tkv_cache_attention(const tkv_cache* c, int32_t layer, const float* q, int32_t n_q, int32_t n_q_heads,
                               int32_t first_pos, float scale, int32_t threads, float* out, size_t out_floats) {
  const char* fn = "tkv_cache_attention";
  return guard(fn, [&] {
    if (!c) return null_arg(fn, "cache");
    if (!q) return null_arg(fn, "q");
    if (!out) return null_arg(fn, "out");
    const KvCache& kc = *c->cache;
    if (layer < 0 || layer >= kc.n_layer())
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": layer " + std::to_string(layer) + " is outside [0, " +
                                        std::to_string(kc.n_layer()) + ")");
    if (n_q < 1 || n_q_heads < 1 || first_pos < 0)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": n_q and n_q_heads must be >= 1 and first_pos >= 0");
    // The layer's rows written so far (append fills layers one by one).
    const int n_kv = kc.layer_tokens(layer);
    if (int64_t(first_pos) + n_q > n_kv)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": queries at positions [" + std::to_string(first_pos) + ", " +
                                        std::to_string(int64_t(first_pos) + n_q) + ") but layer " +
                                        std::to_string(layer) + " holds " + std::to_string(n_kv) +
                                        " tokens (append the queries' own K/V first)");
    const size_t need = size_t(n_q) * size_t(n_q_heads) * size_t(kc.head_dim());
    if (out_floats < need)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": out holds " + std::to_string(out_floats) + " floats, " +
                                      std::to_string(need) + " needed");
    AttentionArgs a;
    a.q = q;
    a.n_q = n_q;
    a.n_q_heads = n_q_heads;
    a.n_kv = n_kv;
    a.n_kv_heads = kc.n_kv_heads();
    a.d = kc.head_dim();
    a.causal_offset = first_pos;
    a.scale = scale;
    a.threads = capi::resolve_threads(threads);
    a.out = out;
    // The cache's own attention: its rows, means, and any protected rows
    // (sinks, the recent ring) of a preset or policy merged in.
    Status s = kc.attend(layer, a);
    if (!s.ok()) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + s.message());
    return TKV_OK;
  });
}

// ------------------------------------------------------------------ models

tkv_status tkv_model_load(const char* path, tkv_model** out) {
  const char* fn = "tkv_model_load";
  return guard(fn, [&] {
    if (!out) return null_arg(fn, "out");
    *out = nullptr;
    if (!path) return null_arg(fn, "path");
    auto m = Model::load(path);
    if (!m) return fail(capi::file_error(path, TKV_ERR_FORMAT), std::string(fn) + ": " + m.error());
    auto h = std::make_unique<tkv_model>();
    h->model = std::move(*m);
    *out = h.release();
    return TKV_OK;
  });
}

void tkv_model_free(tkv_model* m) { delete m; }
const char* tkv_model_arch(const tkv_model* m) { return m ? m->model->config().arch.c_str() : ""; }
int32_t tkv_model_n_layer(const tkv_model* m) { return m ? m->model->config().n_layer : 0; }
int32_t tkv_model_n_head(const tkv_model* m) { return m ? m->model->config().n_head : 0; }
int32_t tkv_model_n_head_kv(const tkv_model* m) { return m ? m->model->config().n_head_kv : 0; }
int32_t tkv_model_head_dim(const tkv_model* m) { return m ? m->model->config().head_dim : 0; }
int32_t tkv_model_n_vocab(const tkv_model* m) { return m ? m->model->config().n_vocab : 0; }
int32_t tkv_model_n_ctx_train(const tkv_model* m) { return m ? m->model->config().n_ctx_train : 0; }
int32_t tkv_model_bos(const tkv_model* m) { return m ? m->model->tokenizer().bos() : -1; }
int32_t tkv_model_eos(const tkv_model* m) { return m ? m->model->tokenizer().eos() : -1; }

tkv_status tkv_model_config_json(const tkv_model* m, char* json, size_t cap, size_t* json_len) {
  const char* fn = "tkv_model_config_json";
  return guard(fn, [&] {
    if (!m) return null_arg(fn, "model");
    if (!json_len) return null_arg(fn, "json_len");
    const ModelConfig& c = m->model->config();
    nlohmann::json j = {{"arch", c.arch},         {"n_layer", c.n_layer},       {"n_embd", c.n_embd},
                        {"n_head", c.n_head},     {"n_head_kv", c.n_head_kv},   {"head_dim", c.head_dim},
                        {"n_ff", c.n_ff},         {"n_vocab", c.n_vocab},       {"n_ctx_train", c.n_ctx_train},
                        {"eps", c.eps},           {"rope_base", c.rope_base},   {"rope_scale", c.rope_scale},
                        {"rope_dims", c.rope_dims}, {"rope_neox", c.rope_neox}, {"qkv_bias", c.qkv_bias},
                        {"qk_norm", c.qk_norm},
                        {"tied_output", m->model->file().tensor("output.weight") == nullptr}};
    const std::string s = j.dump();
    *json_len = s.size();
    if (!json || s.size() + 1 > cap)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": json holds " + std::to_string(cap) + " bytes, " +
                                      std::to_string(s.size() + 1) + " needed");
    std::memcpy(json, s.c_str(), s.size() + 1);
    return TKV_OK;
  });
}

size_t tkv_model_n_tensors(const tkv_model* m) { return m ? m->model->file().tensors().size() : 0; }

tkv_status tkv_model_tensor_info(const tkv_model* m, size_t index, const char** name, const char** type,
                                 int64_t dims[4], int32_t* n_dims) {
  const char* fn = "tkv_model_tensor_info";
  return guard(fn, [&] {
    if (!m) return null_arg(fn, "model");
    const auto& ts = m->model->file().tensors();
    if (index >= ts.size())
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": index " + std::to_string(index) + " is outside [0, " +
                                        std::to_string(ts.size()) + ")");
    const gguf::Tensor& t = ts[index];
    if (name) *name = t.name.c_str();
    if (type) *type = gguf::tensor_type(t.type) ? gguf::tensor_type(t.type)->name : "unknown";
    if (n_dims) *n_dims = static_cast<int32_t>(std::min<size_t>(t.dims.size(), 4));
    if (dims)
      for (size_t i = 0; i < 4; ++i) dims[i] = i < t.dims.size() ? static_cast<int64_t>(t.dims[i]) : 1;
    return TKV_OK;
  });
}

tkv_status tkv_model_tensor_f32(const tkv_model* m, const char* name, float* out, size_t out_floats) {
  const char* fn = "tkv_model_tensor_f32";
  return guard(fn, [&] {
    if (!m) return null_arg(fn, "model");
    if (!name) return null_arg(fn, "name");
    if (!out) return null_arg(fn, "out");
    const gguf::Tensor* t = m->model->file().tensor(name);
    if (!t) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": no tensor named '" + name + "' in the model");
    if (out_floats < t->n_elements)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": out holds " + std::to_string(out_floats) + " floats, '" +
                                      name + "' has " + std::to_string(t->n_elements));
    const gguf::TensorType* tt = gguf::tensor_type(t->type);
    const int64_t cols = t->dims.empty() ? 1 : static_cast<int64_t>(t->dims[0]);
    if (!tt || cols < 1 || cols % tt->block != 0)
      return fail(TKV_ERR_FORMAT, std::string(fn) + ": '" + name + "' has a type or row length the engine cannot decode");
    const size_t row_bytes = size_t(cols / tt->block) * tt->block_bytes;
    const int64_t rows = static_cast<int64_t>(t->n_elements) / cols;
    for (int64_t r = 0; r < rows; ++r) unpack_f32(t->type, t->data + size_t(r) * row_bytes, 0, cols, out + r * cols);
    return TKV_OK;
  });
}

tkv_status tkv_tokenize(const tkv_model* m, const char* text, size_t text_len, int32_t add_bos, int32_t* tokens,
                        size_t cap, size_t* n_tokens) {
  const char* fn = "tkv_tokenize";
  return guard(fn, [&] {
    if (!m) return null_arg(fn, "model");
    if (!n_tokens) return null_arg(fn, "n_tokens");
    if (!text && text_len > 0) return null_arg(fn, "text");
    const auto ids = m->model->tokenizer().encode(std::string_view(text ? text : "", text_len), add_bos != 0);
    *n_tokens = ids.size();
    if (ids.size() > cap || (!tokens && !ids.empty()))
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": tokens holds " + std::to_string(cap) + ", the text has " +
                                      std::to_string(ids.size()) + " tokens");
    std::copy(ids.begin(), ids.end(), tokens);
    return TKV_OK;
  });
}

tkv_status tkv_detokenize(const tkv_model* m, const int32_t* tokens, size_t n, char* text, size_t cap,
                          size_t* text_len) {
  const char* fn = "tkv_detokenize";
  return guard(fn, [&] {
    if (!m) return null_arg(fn, "model");
    if (!text_len) return null_arg(fn, "text_len");
    if (!tokens && n > 0) return null_arg(fn, "tokens");
    const int32_t V = m->model->config().n_vocab;
    for (size_t i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= V)
        return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": token " + std::to_string(i) + " (" +
                                          std::to_string(tokens[i]) + ") is outside the vocabulary [0, " +
                                          std::to_string(V) + ")");
    const std::string s = m->model->tokenizer().decode(std::vector<int32_t>(tokens, tokens + n));
    *text_len = s.size();
    if (!text || cap < s.size() + 1)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": text holds " + std::to_string(cap) + " bytes, " +
                                      std::to_string(s.size() + 1) + " needed");
    std::memcpy(text, s.c_str(), s.size() + 1);
    return TKV_OK;
  });
}

// --------------------------------------------------------------- contexts

tkv_context_params tkv_context_default_params(void) {
  tkv_context_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.n_ctx = 4096;
  p.type_k = p.type_v = "tq4";
  p.mean_center = 1;
  p.batch = 512;
  return p;
}

tkv_status tkv_context_create(const tkv_model* m, const tkv_context_params* pp, tkv_context** out) {
  const char* fn = "tkv_context_create";
  return guard(fn, [&] {
    if (!out) return null_arg(fn, "out");
    *out = nullptr;
    if (!m) return null_arg(fn, "model");
    tkv_context_params p;
    if (tkv_status s = capi::read_params(fn, "params", pp, tkv_context_default_params(), p)) return s;
    const ModelConfig& c = m->model->config();
    if (p.n_ctx < 1 || p.n_ctx > (1 << 22))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": n_ctx " + std::to_string(p.n_ctx) + " is outside [1, 2^22]");
    if (p.batch < 1 || p.batch > (1 << 16))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": batch " + std::to_string(p.batch) + " is outside [1, 65536]");
    auto h = std::make_unique<tkv_context>();
    h->model = m->model.get();
    if (tkv_status s = capi::cache_options(fn, p.type_k, p.type_v, p.mean_center, p.preset, p.policy_path,
                                           c.kv_shape().n_layer, m->model.get(), h->options))
      return s;
    h->n_ctx = c.n_ctx_train > 0 ? std::min(p.n_ctx, c.n_ctx_train) : p.n_ctx;
    h->options.capacity = h->n_ctx;
    h->threads = capi::resolve_threads(p.threads);
    h->batch = p.batch;
    auto cache = KvCache::create(c.kv_shape(), h->options);
    if (!cache) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + cache.error());
    h->cache = std::move(*cache);
    h->logits.resize(c.n_vocab);
    *out = h.release();
    return TKV_OK;
  });
}

void tkv_context_free(tkv_context* ctx) { delete ctx; }
int32_t tkv_context_n_tokens(const tkv_context* ctx) { return ctx ? static_cast<int32_t>(ctx->tokens.size()) : 0; }
int32_t tkv_context_n_ctx(const tkv_context* ctx) { return ctx ? ctx->n_ctx : 0; }
double tkv_context_k_bits(const tkv_context* ctx) { return ctx ? ctx->cache->k_bits_per_value() : 0.0; }
double tkv_context_v_bits(const tkv_context* ctx) { return ctx ? ctx->cache->v_bits_per_value() : 0.0; }
const float* tkv_context_logits(const tkv_context* ctx) {
  return ctx && ctx->has_logits ? ctx->logits.data() : nullptr;
}

tkv_status tkv_context_tokens(const tkv_context* ctx, int32_t* tokens, size_t cap, size_t* n_tokens) {
  const char* fn = "tkv_context_tokens";
  return guard(fn, [&] {
    if (!ctx) return null_arg(fn, "ctx");
    if (!n_tokens) return null_arg(fn, "n_tokens");
    *n_tokens = ctx->tokens.size();
    if (ctx->tokens.size() > cap || (!tokens && !ctx->tokens.empty()))
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": tokens holds " + std::to_string(cap) + ", the context has " +
                                      std::to_string(ctx->tokens.size()));
    std::copy(ctx->tokens.begin(), ctx->tokens.end(), tokens);
    return TKV_OK;
  });
}

tkv_status tkv_context_truncate(tkv_context* ctx, int32_t n) {
  const char* fn = "tkv_context_truncate";
  return guard(fn, [&] {
    if (!ctx) return null_arg(fn, "ctx");
    if (n < 0 || n > static_cast<int32_t>(ctx->tokens.size()))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": n " + std::to_string(n) + " is outside [0, " +
                                        std::to_string(ctx->tokens.size()) + "]");
    if (n == static_cast<int32_t>(ctx->tokens.size())) return TKV_OK;
    if (ctx->cache->keepable_prefix(n) != n)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": the cache's means were fixed from its first " +
                                        std::to_string(ctx->cache->mean_rows()) + " rows; a prefix of " +
                                        std::to_string(n) + " tokens cannot be kept (0 or at least that many)");
    Status s = ctx->cache->truncate(n);
    if (!s.ok()) return fail(TKV_ERR_INTERNAL, std::string(fn) + ": " + s.message());
    ctx->tokens.resize(n);
    ctx->has_logits = false;
    return TKV_OK;
  });
}

}  // extern "C"
