// `turbokv bench-serve -m MODEL [--streams 1,4,16] [-n 64] [--prompt-tokens 128]
// [cache flags] [-t THREADS] [--budget-contexts CTX --budget SIZE --formats a,b]`:
// the serving engine's throughput in this process (no HTTP): aggregate
// generated tokens/s and time to first token with 1, 4, 16 concurrent
// greedy streams (the ratio to one stream shows what batched steps buy: the
// weights are read once per step), and how many contexts of CTX tokens a KV
// budget admits per cache format.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>

#include "model/model.h"
#include "server/engine.h"
#include "tools/arg_lists.h"
#include "tools/kv_flags.h"
#include "tools/common_flags.h"
#include "tools/subcommands.h"

namespace tkv {

Expected<size_t> parse_size(const std::string& s);  // serve_cli.cpp

void register_bench_serve(CLI::App& app) {
  struct Opt {
    std::string model, streams = "1,4,16", formats = "f16,q8_0,tq4,tq3", budget = "4GiB";
    int n = 64, prompt = 128, threads = 0, ctx_fit = 8192, reps = 1;
    CacheFlags cache{"tq4", "tq4"};
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("bench-serve", "Serving throughput (concurrent streams) and contexts per KV budget");
  add_model_flag(cmd, o->model);
  cmd->add_option("--streams", o->streams, "concurrent greedy streams to measure, comma-separated");
  cmd->add_option("-n,--n-predict", o->n, "tokens each stream generates")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--prompt-tokens", o->prompt, "prompt tokens per stream")->check(CLI::Range(1, 1 << 16));
  add_threads_flag(cmd, o->threads);
  cmd->add_option("--fit-ctx", o->ctx_fit, "context size for the admission table")->check(CLI::Range(16, 1 << 22));
  cmd->add_option("--budget", o->budget, "KV budget for the admission table");
  cmd->add_option("--formats", o->formats, "cache formats for the admission table (K = V)");
  add_cache_flags(cmd, o->cache);
  cmd->callback([o]() {
    auto fail = [](const std::string& m) { fail_command("bench-serve", m); };
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    const Model& model = **m;
    const int threads = resolve_threads(o->threads);
    KvCacheOptions co;
    if (Status s = apply_cache_flags(o->cache, model, co); !s.ok()) fail(s.message());
    std::vector<int> streams;
    std::vector<std::string> formats = split_list(o->formats);
    try {
      streams = parse_int_list(o->streams, "--streams", 1);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    const ModelConfig& c = model.config();
    std::printf("model %s: %d layers, dim %d, %.0f MiB weights; cache K %s V %s; %d threads\n", o->model.c_str(),
                c.n_layer, c.n_embd, model.weight_bytes() / 1048576.0, o->cache.k_label().c_str(),
                o->cache.v_label().c_str(), threads);
    std::printf("%8s %12s %12s %14s %14s\n", "streams", "gen tok/s", "x 1 stream", "TTFT mean ms", "TTFT max ms");
    double base = 0;
    for (int ns : streams) {
      server::EngineOptions eo;
      eo.n_parallel = ns;
      eo.ctx = o->prompt + o->n + 16;
      eo.threads = threads;
      eo.kv_budget = size_t(ns + 1) * (eo.ctx + 256) * 1024 * 1024;  // ample: the bytes per token are far below 1 MiB
      eo.queue_limit = ns;
      auto e = server::Engine::create(model, co, eo);
      if (!e) fail(e.error());
      std::vector<std::shared_ptr<server::Task>> tasks;
      using clock = std::chrono::steady_clock;
      const auto t0 = clock::now();
      for (int i = 0; i < ns; ++i) {
        server::GenRequest g;
        for (int k = 0; k < o->prompt; ++k) g.prompt.push_back((1 + 7919 * (i + 1) * (k + 3)) % c.n_vocab);
        g.sampling.temperature = 0;
        g.max_tokens = o->n;
        server::Engine::Refusal why{};
        auto t = (*e)->submit(std::move(g), &why);
        if (!t) fail(why.message);
        tasks.push_back(t);
      }
      // First token of each stream, then the end of all.
      std::vector<double> ttft(ns, 0);
      std::vector<std::thread> wait;
      for (int i = 0; i < ns; ++i)
        wait.emplace_back([&, i] {
          std::string piece;
          bool first = true;
          while (tasks[i]->next(piece))
            if (first) {
              ttft[i] = std::chrono::duration<double>(clock::now() - t0).count();
              first = false;
            }
          if (first) ttft[i] = std::chrono::duration<double>(clock::now() - t0).count();
        });
      for (auto& w : wait) w.join();
      const double wall = std::chrono::duration<double>(clock::now() - t0).count();
      int64_t gen = 0;
      for (auto& t : tasks) gen += t->completion_tokens;
      const auto met = (*e)->metrics();
      // Generation rate over the decode part: wall time less the prefill share.
      const double rate = gen / std::max(1e-9, wall - met.prompt_seconds);
      if (base == 0) base = rate;
      double mean = 0, mx = 0;
      for (double t : ttft) {
        mean += t / ns;
        mx = std::max(mx, t);
      }
      std::printf("%8d %12.1f %12.2f %14.1f %14.1f\n", ns, rate, rate / base, mean * 1e3, mx * 1e3);
      std::fflush(stdout);
    }
    auto budget = parse_size(o->budget);
    if (!budget) fail("--budget: " + budget.error());
    std::printf("\ncontexts of %d tokens in a %.1f GiB KV budget:\n%-28s %12s %10s %10s\n", o->ctx_fit,
                *budget / 1073741824.0, "cache", "bytes/token", "contexts", "x f16");
    double f16 = 0;
    auto row = [&](const std::string& label, const KvCacheOptions& kco) {
      KvCacheOptions x = kco;
      x.capacity = o->ctx_fit;
      auto layout = KvLayout::create(c.kv_shape(), x);
      if (!layout) fail(layout.error());
      const int64_t blocks = BlockPool::blocks_for_budget(**layout, 256, *budget);
      const int64_t fit = blocks / ((o->ctx_fit + 255) / 256);
      if (label == "f16") f16 = double(fit);
      std::printf("%-28s %12zu %10lld %10.2f\n", label.c_str(), (*layout)->bytes_per_token(), static_cast<long long>(fit),
                  f16 > 0 ? fit / f16 : 0.0);
    };
    for (const std::string& f : formats) {
      KvCacheOptions x;
      x.type_k = x.type_v = f;
      row(f, x);
    }
    if (o->cache.kv.any()) row(o->cache.k_label(), co);
  });
}

}  // namespace tkv
