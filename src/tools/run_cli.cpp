// `turbokv run -m MODEL.gguf -p PROMPT -n N [-c CTX] [-t THREADS] [-ctk F] [-ctv F]
// [--seed S] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]
// [--prompt-cache FILE [--prompt-cache-ro]]`: streams the generated text, then
// prompt and generation speed and KV memory. With --prompt-cache, the longest
// common prefix with the prompt saved in FILE is loaded instead of evaluated,
// and the prompt's state is saved there before generation (unless -ro).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cache/kv_cache.h"
#include "codec/format.h"
#include "model/model.h"
#include "model/prompt_cache.h"
#include "model/sampler.h"
#include "text/text_stream.h"
#include "tools/kv_flags.h"
#include "tools/common_flags.h"
#include "tools/subcommands.h"
#include "util/text_file.h"

namespace tkv {

void register_run(CLI::App& app) {
  struct Opt {
    std::string model, prompt = "Once upon a time";
    int n = 64, ctx = 0, threads = 0, batch = 512;
    SamplerOptions s;
    bool no_display_prompt = false;
    CacheFlags cache{"tq4", "tq4"};
    std::string prompt_cache, prompt_file;
    bool prompt_cache_ro = false;
  };
  auto o = std::make_shared<Opt>();
  o->s.seed = 42;
  CLI::App* cmd = app.add_subcommand("run", "Generate text with a GGUF model on the compressed KV cache");
  add_model_flag(cmd, o->model);
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "prompt");
  cmd->add_option("-f,--file", o->prompt_file, "read the prompt from this file")->excludes(p);
  cmd->add_option("-n,--n-predict", o->n, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-c,--ctx-size", o->ctx, "context (0: the model's, capped by free memory)")->check(CLI::Range(0, 1 << 22));
  add_threads_flag(cmd, o->threads);
  cmd->add_option("-b,--batch-size", o->batch, "prompt tokens per forward pass (as serve -b)")->check(CLI::Range(1, 1 << 16));
  add_cache_flags(cmd, o->cache);
  cmd->add_option("--seed", o->s.seed, "sampling seed");
  cmd->add_option("--temp", o->s.temperature, "temperature (0 = greedy)")->check(finite_range(0.0, 100.0));
  cmd->add_option("--top-k", o->s.top_k, "top-k (0 = off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--top-p", o->s.top_p, "top-p (1 = off)")->check(finite_range(0.0, 1.0));
  cmd->add_option("--min-p", o->s.min_p, "min-p (0 = off)")->check(finite_range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", o->s.repeat_penalty, "repetition penalty (1 = off)")->check(finite_range(0.0, 100.0));
  cmd->add_flag("--no-display-prompt", o->no_display_prompt, "print only the generated text");
  cmd->add_option("--prompt-cache", o->prompt_cache, "file to keep the prompt's KV state in: its common prefix with the prompt is reused");
  cmd->add_flag("--prompt-cache-ro", o->prompt_cache_ro, "use --prompt-cache but do not update it");
  cmd->callback([o]() {
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv run: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    const Model& model = **m;
    const ModelConfig& c = model.config();
    const int threads = resolve_threads(o->threads);
    if (!o->prompt_file.empty()) {
      auto text = read_text_file(o->prompt_file);
      if (!text) fail(text.error());
      o->prompt = *text;
    }
    const auto prompt = model.tokenizer().encode(o->prompt, true);
    // Default context: the model's trained one, capped so the cache takes at
    // most half of the memory available now.
    KvCacheOptions co;
    if (Status ks = apply_cache_flags(o->cache, model, co); !ks.ok()) fail(ks.message());
    int ctx = o->ctx;
    if (ctx == 0) {
      auto bits = cache_bits_per_value(co, model);
      if (!bits) fail(bits.error());
      const double per_token = (bits->first + bits->second) / 8.0 * c.head_dim * c.n_head_kv * c.kv_shape().n_layer;
      const double avail = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
      ctx = static_cast<int>(std::min<double>(c.n_ctx_train, std::max(256.0, 0.5 * avail / per_token)));
    }
    if (static_cast<int>(prompt.size()) + o->n > ctx)
      fail("prompt (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(o->n) + " exceeds the context " + std::to_string(ctx) + " (raise -c)");
    co.capacity = ctx;
    if (o->prompt_cache_ro && o->prompt_cache.empty()) fail("--prompt-cache-ro needs --prompt-cache FILE");
    // Cache files hold the base-width rows only, not the protected sinks and
    // recent ring (docs/FORMATS.md §4d): refused before any work, never a
    // file that silently was not written.
    if (!o->prompt_cache.empty() && (co.protect_sinks > 0 || co.protect_recent > 0))
      fail("--prompt-cache cannot keep a cache with protected tokens (" + std::to_string(co.protect_sinks) + " sinks, " +
           std::to_string(co.protect_recent) + " recent, from --kv-protect, --kv-preset or the policy): "
           "drop --prompt-cache or choose a cache without protection");
    std::unique_ptr<KvCache> cache;
    int reused = 0;
    if (!o->prompt_cache.empty()) {
      const auto tl = std::chrono::steady_clock::now();
      auto pc = open_prompt_cache(o->prompt_cache, model, co, prompt);
      if (!pc) fail(pc.error());
      const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - tl).count() * 1e3;
      if (!pc->note.empty())
        std::fprintf(stderr, "prompt cache %s: %s; evaluating the prompt from scratch\n", o->prompt_cache.c_str(),
                     pc->note.c_str());
      std::fprintf(stderr, "prompt cache: reused %d of %zu prompt tokens (%.1f ms to load)\n", pc->reused, prompt.size(), ms);
      cache = std::move(pc->cache);
      reused = pc->reused;
    } else {
      auto made = KvCache::create(c.kv_shape(), co);
      if (!made) fail(made.error());
      cache = std::move(*made);
    }
    const std::string tk = o->cache.k_label(), tv = o->cache.v_label();
    std::fprintf(stderr, "model: %s; %.1f MiB weights\n", c.describe().c_str(), model.weight_bytes() / 1048576.0);
    std::fprintf(stderr, "KV cache: %d tokens in %d layers, K %s %.3f bits/value %.2f MiB, V %s %.3f bits/value %.2f MiB",
                 ctx, cache->n_layer(), tk.c_str(), cache->k_bits_per_value(), cache->k_bytes() / 1048576.0, tv.c_str(),
                 cache->v_bits_per_value(), cache->v_bytes() / 1048576.0);
    for (int l = 0; l < cache->n_layer(); ++l)
      if (cache->layout().window(l) > 0) {
        std::fprintf(stderr, " (sliding-window layers: a ring of %d tokens)", cache->layer_slots(l));
        break;
      }
    if (cache->has_state()) std::fprintf(stderr, ", recurrent state %.2f MiB f32", cache->state_bytes() / 1048576.0);
    std::fprintf(stderr, "\n");
    std::vector<float> logits(c.n_vocab);
    Sampler sampler(o->s);
    std::vector<int32_t> history = prompt;
    if (!o->no_display_prompt) std::cout << o->prompt << std::flush;
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    Status s = prefill(model, prompt.data() + reused, static_cast<int>(prompt.size()) - reused, reused, *cache, threads,
                       o->batch, logits.data());
    if (!s.ok()) fail(s.message());
    const double t_prompt = std::chrono::duration<double>(clock::now() - t0).count();
    if (!o->prompt_cache.empty() && !o->prompt_cache_ro) {
      if (Status ss = save_cache_file(o->prompt_cache, *cache, model.fingerprint(), prompt); ss.ok())
        std::fprintf(stderr, "prompt cache: saved %zu tokens to %s\n", prompt.size(), o->prompt_cache.c_str());
      else
        std::fprintf(stderr, "prompt cache: warning: not saved (%s); the old file is unchanged\n", ss.message().c_str());
    }
    const auto t1 = clock::now();
    TextStream text({});  // whole UTF-8 characters only
    int generated = 0;
    for (int i = 0; i < o->n; ++i) {
      const int32_t next = sampler.sample(logits.data(), c.n_vocab, history);
      if (next == model.tokenizer().eos()) break;
      history.push_back(next);
      ++generated;
      std::cout << text.push(model.tokenizer().piece(next)) << std::flush;
      if (i + 1 == o->n) break;
      s = model.forward(&next, 1, static_cast<int>(history.size()) - 1, *cache, threads, logits.data());
      if (!s.ok()) fail(s.message());
    }
    std::cout << text.finish() << std::endl;  // before the statistics on stderr
    const double t_gen = std::chrono::duration<double>(clock::now() - t1).count();
    const int evaluated = static_cast<int>(prompt.size()) - reused;
    std::fprintf(stderr, "prompt: %d tokens evaluated, %.1f tokens/s (%.1f ms to the first token); generation: %d tokens, %.1f tokens/s\n",
                 evaluated, evaluated / t_prompt, t_prompt * 1e3, generated, generated / std::max(t_gen, 1e-9));
  });
}

}  // namespace tkv
