// `turbokv perplexity -m M -f TEXT [-c 512] [--chunks N] [-b BATCH] [-ctk F] [-ctv F]
// [--kl-divergence-base FILE [--kl-divergence]] [--json-out FILE]`:
// llama-perplexity's method and output.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "eval/kl_base.h"
#include "eval/perplexity.h"
#include "tools/common_flags.h"
#include "tools/json_text.h"
#include "tools/kv_flags.h"
#include "tools/subcommands.h"
#include "util/progress.h"
#include "util/text_file.h"

namespace tkv {

void register_perplexity(CLI::App& app) {
  struct Opt {
    std::string model, file, kl_base, json_out;
    int ctx = 512, chunks = 0, batch = 512, threads = 0;
    bool kl = false, no_progress = false, normalize_newlines = false;
    CacheFlags cache{"f16", "f16"};
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity and KL divergence on a text (llama-perplexity's method)");
  add_model_flag(cmd, o->model);
  cmd->add_option("-f,--file", o->file, "text file (read byte for byte, as llama-perplexity reads it; not needed with a "
                  "llama.cpp base file and --kl-divergence, which holds its tokens)");
  cmd->add_flag("--normalize-newlines", o->normalize_newlines,
                "read CR LF in the text as LF (turbokv's reading before 2026-12; llama-perplexity keeps the bytes)");
  cmd->add_option("-c,--ctx-size", o->ctx, "chunk length")->check(CLI::Range(8, 1 << 20));
  cmd->add_option("--chunks", o->chunks, "chunks to score (0 = all)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("-b,--batch-size", o->batch, "tokens per forward call")->check(CLI::Range(1, 1 << 20));
  add_threads_flag(cmd, o->threads);
  add_cache_flags(cmd, o->cache);
  cmd->add_option("--kl-divergence-base", o->kl_base,
                  "base log-probabilities: written by a base run, read with --kl-divergence (turbokv's files, or "
                  "llama.cpp's from llama-perplexity --kl-divergence-base, whose tokens are then scored)");
  cmd->add_flag("--kl-divergence", o->kl, "compare with the base file");
  add_json_out_flag(cmd, o->json_out);
  add_no_progress_flag(cmd, o->no_progress);
  cmd->callback([o]() {
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv perplexity: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    if (o->kl && o->kl_base.empty()) fail("--kl-divergence needs --kl-divergence-base FILE");
    bool llama_base = false;
    if (o->kl) {
      std::ifstream b(o->kl_base, std::ios::binary);
      if (!b) fail(o->kl_base + ": cannot open the KL base file");
      llama_base = is_llama_kl(b);
    }
    std::string text;
    if (!o->file.empty()) {
      auto t = read_text_file(o->file);
      if (!t) fail(t.error());
      text = o->normalize_newlines ? normalize_newlines(std::move(*t)) : std::move(*t);
    } else if (!llama_base) {
      fail("-f,--file is required (only a llama.cpp KL base file with --kl-divergence brings its own tokens)");
    }
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    PerplexityOptions po;
    po.n_ctx = o->ctx;
    po.max_chunks = o->chunks;
    po.batch = o->batch;
    po.threads = resolve_threads(o->threads);
    if (Status ks = apply_cache_flags(o->cache, **m, po.cache); !ks.ok()) fail(ks.message());
    const std::string kv_desc = (o->cache.kv.any() ? o->cache.kv.label() : "K " + o->cache.ctk + " V " + o->cache.ctv) +
                                protect_label(po.cache);
    po.kl_base = o->kl_base;
    po.kl_write = !o->kl_base.empty() && !o->kl;
    KvCacheOptions at_ctx = po.cache;  // bits per value at this context (protected tokens are averaged over it)
    at_ctx.capacity = o->ctx;
    auto bits = cache_bits_per_value(at_ctx, **m);
    if (!bits) fail(bits.error());
    const auto [k_bits, v_bits] = *bits;
    std::fprintf(stderr, "perplexity: %s, -c %d, cache %s (K %.4f, V %.4f bits/value)\n", o->model.c_str(), o->ctx,
                 kv_desc.c_str(), k_bits, v_bits);
    Progress progress("perplexity", 0, "chunks", !o->no_progress);
    if (llama_base && !o->file.empty())
      std::fprintf(stderr, "perplexity: %s is llama.cpp's: its tokens are scored, -f %s is not read\n",
                   o->kl_base.c_str(), o->file.c_str());
    auto r = perplexity(**m, text, po, [&](int i, int chunks, double ppl) {
      char b[48];
      std::snprintf(b, sizeof b, "PPL %.4f", ppl);
      progress.set_total(chunks);
      progress.update(i, b);
    });
    progress.done();
    if (!r) fail(r.error());
    std::printf("Final estimate: PPL = %.4f +/- %.5f (%d chunks of %d tokens)\n", r->ppl, r->ppl_err, r->chunks, o->ctx);
    if (r->has_kl) {
      const KlStats& k = r->kl;
      std::printf("\n====== KL divergence statistics ======\n");
      std::printf("Mean    KLD: %10.6f ± %10.6f\n", k.mean, k.mean_err);
      std::printf("Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\n95.0%%   KLD: %10.6f\n", k.max, k.p999, k.p99, k.p95);
      std::printf("90.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\n10.0%%   KLD: %10.6f\n 5.0%%   KLD: %10.6f\n", k.p90, k.median, k.p10, k.p05);
      std::printf(" 1.0%%   KLD: %10.6f\n 0.1%%   KLD: %10.6f\nMinimum KLD: %10.6f\n", k.p01, k.p001, k.min);
      std::printf("\n====== Token probability statistics ======\n");
      std::printf("Mean    Δp: %6.3f ± %5.3f %%\nRMS Δp    : %6.3f %%\nSame top p: %6.3f %%\n", 100 * k.dp_mean,
                  100 * k.dp_err, 100 * k.dp_rms, k.same_top);
    }
    if (!o->json_out.empty()) {
      nlohmann::json j = {{"tool", "perplexity"}, {"model", o->model}, {"file", o->file}, {"type_k", o->cache.k_label()},
                          {"type_v", o->cache.v_label()}, {"ctx", o->ctx}, {"chunks", r->chunks}, {"ppl", r->ppl},
                          {"ppl_err", r->ppl_err}, {"mean_center", o->cache.mean_center == "on"},
                          {"command_line", command_line()}};
      j["bits_per_value"] = 0.5 * (k_bits + v_bits);
      if (o->cache.kv.any()) j["kv_policy"] = o->cache.kv.label();
      if (r->has_kl)
        j["kld"] = {{"mean", r->kl.mean}, {"mean_err", r->kl.mean_err}, {"max", r->kl.max}, {"median", r->kl.median},
                    {"p99", r->kl.p99}, {"same_top_p", r->kl.same_top}, {"dp_rms", r->kl.dp_rms}};
      std::ofstream out(o->json_out, std::ios::app);
      if (!out) fail(o->json_out + ": cannot write");
      out << json_text(j) << "\n";
    }
  });

}

}  // namespace tkv
