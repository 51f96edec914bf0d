// The C API's evaluation, sampling, generation, cache files, perplexity and
// calibration (include/turbokv.h).
#include <algorithm>

#include "cache/cache_file.h"
#include "capi/capi_common.h"
#include "eval/calibrate.h"
#include "eval/perplexity.h"
#include "text/text_stream.h"

using namespace tkv;
using capi::fail;
using capi::guard;
using capi::null_arg;

namespace {

// Evaluates tokens after those the context holds, one batch at a time. A
// batch that fails leaves the context as it was before that batch (the
// cache is cut back to it; when the failed batch fixed the cache's means,
// which then cannot be unfixed, to nothing, and the message says so).
tkv_status eval_tokens(const char* fn, tkv_context& ctx, const int32_t* tokens, size_t n) {
  const ModelConfig& c = ctx.model->config();
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": token " + std::to_string(i) + " (" +
                                        std::to_string(tokens[i]) + ") is outside the vocabulary [0, " +
                                        std::to_string(c.n_vocab) + ")");
  if (ctx.tokens.size() + n > size_t(ctx.n_ctx))
    return fail(TKV_ERR_MEMORY, std::string(fn) + ": the context holds " + std::to_string(ctx.tokens.size()) +
                                    " tokens; " + std::to_string(n) + " more exceed n_ctx " +
                                    std::to_string(ctx.n_ctx));
  for (size_t done = 0; done < n;) {
    const int b = static_cast<int>(std::min<size_t>(size_t(ctx.batch), n - done));
    const int pos = static_cast<int>(ctx.tokens.size());
    Status s = ctx.model->forward(tokens + done, b, pos, *ctx.cache, ctx.threads, ctx.logits.data());
    if (!s.ok()) {
      std::string lost;
      const int keep = ctx.cache->keepable_prefix(pos);
      if (ctx.cache->truncate(keep).ok() && keep == pos) {
        lost = " (the context keeps its " + std::to_string(pos) + " tokens before this batch)";
      } else {
        (void)ctx.cache->truncate(0);
        ctx.tokens.clear();
        lost = " (the batch had fixed the cache's means: the context was reset to empty)";
      }
      ctx.has_logits = false;
      return fail(TKV_ERR_VALUE, std::string(fn) + ": " + s.message() + lost);
    }
    ctx.tokens.insert(ctx.tokens.end(), tokens + done, tokens + done + b);
    ctx.has_logits = true;
    done += size_t(b);
  }
  return TKV_OK;
}

SamplerOptions sampler_options(const tkv_sampler_params& p) {
  SamplerOptions o;
  o.temperature = p.temperature;
  o.top_k = p.top_k;
  o.top_p = p.top_p;
  o.min_p = p.min_p;
  o.repeat_penalty = p.repeat_penalty;
  o.repeat_last_n = p.repeat_last_n;
  o.presence_penalty = p.presence_penalty;
  o.frequency_penalty = p.frequency_penalty;
  o.seed = p.seed;
  return o;
}

tkv_status check_sampler(const char* fn, const tkv_sampler_params& p) {
  auto bad = [&](const std::string& what) { return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": sampling " + what); };
  if (!(p.temperature >= 0.0f && p.temperature <= 100.0f)) return bad("temperature must be in [0, 100]");
  if (p.top_k < 0) return bad("top_k must be >= 0");
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) return bad("top_p must be in [0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p must be in [0, 1]");
  if (!(p.repeat_penalty > 0.0f && p.repeat_penalty <= 100.0f)) return bad("repeat_penalty must be in (0, 100]");
  if (p.repeat_last_n < 0) return bad("repeat_last_n must be >= 0");
  if (!(std::abs(p.presence_penalty) <= 2.0f && std::abs(p.frequency_penalty) <= 2.0f))
    return bad("presence_penalty and frequency_penalty must be in [-2, 2]");
  return TKV_OK;
}

}  // namespace

extern "C" {

tkv_status tkv_eval(tkv_context* ctx, const int32_t* tokens, size_t n) {
  const char* fn = "tkv_eval";
  return guard(fn, [&] {
    if (!ctx) return null_arg(fn, "ctx");
    if (n == 0) return TKV_OK;
    if (!tokens) return null_arg(fn, "tokens");
    return eval_tokens(fn, *ctx, tokens, n);
  });
}

// --------------------------------------------------------------- sampling

tkv_sampler_params tkv_sampler_default_params(void) {
  tkv_sampler_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  const SamplerOptions d;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.repeat_last_n = d.repeat_last_n;
  p.seed = 42;
  return p;
}

tkv_status tkv_sampler_create(const tkv_sampler_params* pp, tkv_sampler** out) {
  const char* fn = "tkv_sampler_create";
  return guard(fn, [&] {
    if (!out) return null_arg(fn, "out");
    *out = nullptr;
    tkv_sampler_params p;
    if (tkv_status s = capi::read_params(fn, "params", pp, tkv_sampler_default_params(), p)) return s;
    if (tkv_status s = check_sampler(fn, p)) return s;
    *out = new tkv_sampler(sampler_options(p));
    return TKV_OK;
  });
}

void tkv_sampler_free(tkv_sampler* s) { delete s; }

tkv_status tkv_sample(tkv_sampler* s, const tkv_context* ctx, int32_t* token) {
  const char* fn = "tkv_sample";
  return guard(fn, [&] {
    if (!s) return null_arg(fn, "sampler");
    if (!ctx) return null_arg(fn, "ctx");
    if (!token) return null_arg(fn, "token");
    if (!ctx->has_logits) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": the context has no logits yet (tkv_eval first)");
    *token = s->sampler.sample(ctx->logits.data(), static_cast<int>(ctx->logits.size()), ctx->tokens);
    return TKV_OK;
  });
}

tkv_status tkv_generate(tkv_context* ctx, const char* prompt, size_t prompt_len, int32_t n_predict,
                        const tkv_sampler_params* sp, tkv_token_callback callback, void* user_data,
                        int32_t* n_generated) {
  const char* fn = "tkv_generate";
  return guard(fn, [&] {
    if (n_generated) *n_generated = 0;
    if (!ctx) return null_arg(fn, "ctx");
    if (!prompt && prompt_len > 0) return null_arg(fn, "prompt");
    if (n_predict < 0) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": n_predict must be >= 0");
    tkv_sampler_params p;
    if (tkv_status s = capi::read_params(fn, "sampling", sp, tkv_sampler_default_params(), p)) return s;
    if (tkv_status s = check_sampler(fn, p)) return s;
    const Tokenizer& tok = ctx->model->tokenizer();
    const auto ids = tok.encode(std::string_view(prompt ? prompt : "", prompt_len), ctx->tokens.empty());
    if (ids.empty() && !ctx->has_logits)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": nothing to start from: the prompt is empty and the context "
                                                      "has no logits (the model adds no BOS)");
    if (tkv_status s = eval_tokens(fn, *ctx, ids.data(), ids.size())) return s;
    Sampler sampler(sampler_options(p));
    const size_t prompt_end = ctx->tokens.size();
    TextStream text({});
    auto emit = [&](int32_t token, const std::string& t) {
      return callback && callback(token, t.data(), t.size(), user_data) != 0;
    };
    bool stopped = false;
    for (int i = 0; i < n_predict && ctx->tokens.size() < size_t(ctx->n_ctx); ++i) {
      const int32_t next =
          sampler.sample(ctx->logits.data(), static_cast<int>(ctx->logits.size()), ctx->tokens, prompt_end);
      if (next == tok.eos()) break;
      stopped = emit(next, text.push(tok.piece(next)));
      // Every sampled token is evaluated, so that the context always holds
      // its tokens' rows and the logits after the last (generation can go on).
      if (tkv_status s = eval_tokens(fn, *ctx, &next, 1)) return s;
      if (n_generated) ++*n_generated;
      if (stopped) break;
    }
    if (const std::string held = text.finish(); !held.empty() && !stopped) emit(-1, held);
    if (stopped) return fail(TKV_ERR_STOPPED, std::string(fn) + ": stopped by the callback");
    return TKV_OK;
  });
}

// ------------------------------------------------------------ cache files

tkv_status tkv_context_save(const tkv_context* ctx, const char* path) {
  const char* fn = "tkv_context_save";
  return guard(fn, [&] {
    if (!ctx) return null_arg(fn, "ctx");
    if (!path) return null_arg(fn, "path");
    Status s = save_cache_file(path, *ctx->cache, ctx->model->fingerprint(), ctx->tokens);
    if (!s.ok()) return fail(TKV_ERR_IO, std::string(fn) + ": " + s.message());
    return TKV_OK;
  });
}

tkv_status tkv_context_load(tkv_context* ctx, const char* path) {
  const char* fn = "tkv_context_load";
  return guard(fn, [&] {
    if (!ctx) return null_arg(fn, "ctx");
    if (!path) return null_arg(fn, "path");
    const ModelConfig& c = ctx->model->config();
    auto loaded = load_cache_file(path, c.kv_shape(), ctx->options, ctx->model->fingerprint(),
                                  c.n_vocab);
    if (!loaded) return fail(capi::file_error(path, TKV_ERR_FORMAT), std::string(fn) + ": " + loaded.error());
    if (loaded->tokens.size() > size_t(ctx->n_ctx))
      return fail(TKV_ERR_MEMORY, std::string(fn) + ": " + path + " holds " + std::to_string(loaded->tokens.size()) +
                                      " tokens, more than n_ctx " + std::to_string(ctx->n_ctx));
    ctx->cache = std::move(loaded->cache);
    ctx->tokens = std::move(loaded->tokens);
    ctx->has_logits = false;
    return TKV_OK;
  });
}

// --------------------------------------------------------------- evaluation

tkv_status tkv_perplexity(const tkv_model* m, const char* text, size_t text_len, int32_t n_ctx, int32_t max_chunks,
                          const tkv_context_params* cp, tkv_perplexity_result* result) {
  const char* fn = "tkv_perplexity";
  return guard(fn, [&] {
    if (!m) return null_arg(fn, "model");
    if (!text && text_len > 0) return null_arg(fn, "text");
    if (!result) return null_arg(fn, "result");
    if (result->struct_size < sizeof(size_t) || result->struct_size > sizeof(tkv_perplexity_result))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": result->struct_size must be sizeof(tkv_perplexity_result)");
    tkv_context_params p;
    if (tkv_status s = capi::read_params(fn, "params", cp, tkv_context_default_params(), p)) return s;
    if (n_ctx < 8 || n_ctx > (1 << 20) || max_chunks < 0)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": n_ctx must be in [8, 2^20] and max_chunks >= 0");
    if (p.batch < 1) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": batch must be >= 1");
    PerplexityOptions o;
    o.n_ctx = n_ctx;
    o.max_chunks = max_chunks;
    o.batch = p.batch;
    o.threads = capi::resolve_threads(p.threads);
    if (tkv_status s = capi::cache_options(fn, p.type_k, p.type_v, p.mean_center, p.preset, p.policy_path,
                                           m->model->config().kv_shape().n_layer, m->model.get(), o.cache))
      return s;
    auto r = perplexity(*m->model, normalize_newlines(std::string(text ? text : "", text_len)), o);
    if (!r) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + r.error());
    tkv_perplexity_result out;
    std::memset(&out, 0, sizeof out);
    out.struct_size = sizeof out;
    out.ppl = r->ppl;
    out.ppl_err = r->ppl_err;
    out.chunks = r->chunks;
    out.scored_tokens = r->scored;
    const size_t size = result->struct_size;
    std::memcpy(static_cast<void*>(result), &out, size);
    result->struct_size = size;
    return TKV_OK;
  });
}

// ------------------------------------------------------------ calibration

tkv_calibrate_params tkv_calibrate_default_params(void) {
  tkv_calibrate_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  const CalibrateOptions d;
  p.tokens = d.tokens;
  p.n_ctx = d.n_ctx;
  p.budget = d.budget;
  p.bits = d.bits;
  p.kld_tokens = d.kld_tokens;
  p.seed = d.seed;
  return p;
}

tkv_status tkv_calibrate(const tkv_model* m, const char* text, size_t text_len, const tkv_calibrate_params* pp,
                         const char* policy_path) {
  const char* fn = "tkv_calibrate";
  return guard(fn, [&] {
    if (!m) return null_arg(fn, "model");
    if (!text && text_len > 0) return null_arg(fn, "text");
    if (!policy_path) return null_arg(fn, "policy_path");
    tkv_calibrate_params p;
    if (tkv_status s = capi::read_params(fn, "params", pp, tkv_calibrate_default_params(), p)) return s;
    if (p.tokens < 1 || p.kld_tokens < 1 || !(p.bits > 0 && p.bits <= 8))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": tokens and kld_tokens must be >= 1, bits in (0, 8]");
    CalibrateOptions o;
    o.tokens = p.tokens;
    o.n_ctx = p.n_ctx;
    o.budget = p.budget;
    o.bits = p.bits;
    o.kld_tokens = p.kld_tokens;
    o.threads = capi::resolve_threads(p.threads);
    o.seed = p.seed;
    bool stopped = false;
    auto progress = [&](const std::string& line) {
      if (p.progress && p.progress(line.c_str(), p.user_data) != 0) stopped = true;
      return !stopped;
    };
    auto pol = calibrate(*m->model, normalize_newlines(std::string(text ? text : "", text_len)), o, nullptr, progress);
    if (stopped) return fail(TKV_ERR_STOPPED, std::string(fn) + ": stopped by the progress callback; nothing written");
    if (!pol) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + pol.error());
    Status s = write_kv_policy(policy_path, *pol);
    if (!s.ok()) return fail(TKV_ERR_IO, std::string(fn) + ": " + s.message());
    return TKV_OK;
  });
}

}  // extern "C"
