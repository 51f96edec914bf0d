// `turbokv bench-model`: decode and prefill speed of a whole model. Decode at
// short context streams every weight once per token, so tokens/s x weight
// bytes is compared with the machine's bandwidth measured in the same run.
// Without -m it generates a random Q8_0 model of about --size-mb MiB.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cache/kv_cache.h"
#include "model/gen_model.h"
#include "model/model.h"
#include "tools/common_flags.h"
#include "tools/subcommands.h"
#include "util/bandwidth.h"

namespace tkv {

void register_bench_model(CLI::App& app) {
  struct Opt {
    std::string model, type = "Q8_0", ctk = "tq4";
    int size_mb = 1024, threads = 0, n_gen = 16, n_prompt = 512;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("bench-model", "Decode/prefill speed of a model against the weight-streaming floor");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: generate a random one)");
  cmd->add_option("--size-mb", o->size_mb, "size of the generated model")->check(CLI::Range(16, 16384));
  cmd->add_option("--type", o->type, "weight type of the generated model");
  add_threads_flag(cmd, o->threads);
  cmd->add_option("-n", o->n_gen, "tokens to decode")->check(CLI::Range(1, 4096));
  cmd->add_option("-p", o->n_prompt, "prompt tokens for the prefill figure")->check(CLI::Range(1, 8192));
  cmd->add_option("--cache-type-k,--cache-type-v", o->ctk, "KV cache format (K and V)");
  cmd->callback([o]() {
    o->threads = resolve_threads(o->threads);
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv bench-model: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    std::string path = o->model;
    if (path.empty()) {
      GenModelOptions g;
      g.type = o->type;
      g.dim = 2048;
      g.heads = 16;
      g.kv_heads = 4;
      g.head_dim = 128;
      g.ffn = 5632;
      g.vocab = 32000;
      // ~51M weights a layer plus 2 x 65M for embeddings and output.
      const double per_layer = (2.0 * 2048 * 2048 + 2.0 * 2048 * 512 + 3.0 * 2048 * 5632) * 34.0 / 32.0;
      g.layers = std::max(1, static_cast<int>((o->size_mb * 1048576.0 - 2 * 2048.0 * 32000 * 34 / 32) / per_layer));
      path = "/tmp/turbokv-bench-model.gguf";
      std::fprintf(stderr, "generating a random %s model (%d layers, dim 2048) at %s...\n", o->type.c_str(), g.layers, path.c_str());
      Status s = generate_model(g, nullptr, path);
      if (!s.ok()) fail(s.message());
    }
    auto m = Model::load(path);
    if (!m) fail(m.error());
    const Model& model = **m;
    const ModelConfig& c = model.config();
    const Bandwidth bw = measure_bandwidth(o->threads);
    KvCacheOptions co;
    co.type_k = co.type_v = o->ctk;
    co.capacity = o->n_prompt + o->n_gen + 8;
    auto cache = KvCache::create(c.kv_shape(), co);
    if (!cache) fail(cache.error());
    std::vector<int32_t> prompt(o->n_prompt);
    for (int i = 0; i < o->n_prompt; ++i) prompt[i] = 3 + (i * 7919) % (c.n_vocab - 3);
    std::vector<float> logits(c.n_vocab);
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    Status s = model.forward(prompt.data(), o->n_prompt, 0, **cache, o->threads, logits.data());
    if (!s.ok()) fail(s.message());
    const double t_prompt = std::chrono::duration<double>(clock::now() - t0).count();
    // Decode: each step reads every weight matrix once (the embedding table
    // only one row, so it is not counted).
    const gguf::Tensor* emb = model.file().tensor("token_embd.weight");
    const bool tied = model.file().tensor("output.weight") == nullptr;
    const double bytes = static_cast<double>(model.weight_bytes()) - (tied ? 0.0 : static_cast<double>(emb->n_bytes));
    double best = 1e30, total = 0;
    int32_t tok = prompt.back();
    for (int i = 0; i < o->n_gen; ++i) {
      t0 = clock::now();
      s = model.forward(&tok, 1, o->n_prompt + i, **cache, o->threads, logits.data());
      if (!s.ok()) fail(s.message());
      const double dt = std::chrono::duration<double>(clock::now() - t0).count();
      best = std::min(best, dt);
      total += dt;
      tok = 3 + (tok * 31) % (c.n_vocab - 3);
    }
    const double mean = total / o->n_gen;
    // The weight type: the generated model's, or a given file's main one.
    const std::string type = o->model.empty() ? o->type : model.weight_type();
    std::printf("model %s: %.1f MiB of weights read per token (%s), %d layers, %d threads\n", path.c_str(), bytes / 1048576.0,
                type.c_str(), c.n_layer, o->threads);
    std::printf("bandwidth: copy %.1f GB/s (read+write traffic), read-only %.1f GB/s\n", bw.copy_gbs, bw.read_gbs);
    // The ceiling of decode at depth 0: the weights streamed once per token at
    // the read-only (summing) bandwidth, which a weight-streaming kernel can
    // reach and a copy's read+write figure can understate or overstate.
    std::printf("decode ceiling: %.1f tokens/s at the read-only bandwidth (%.1f at copy)\n", bw.read_gbs * 1e9 / bytes,
                bw.copy_gbs * 1e9 / bytes);
    std::printf("prefill pp%d: %.1f tokens/s\n", o->n_prompt, o->n_prompt / t_prompt);
    std::printf("decode tg%d: %.2f tokens/s (mean), best step %.1f ms -> %.1f GB/s of weights, %.0f%% of copy, %.0f%% of read-only\n",
                o->n_gen, 1.0 / mean, best * 1e3, bytes / best / 1e9, 100.0 * bytes / best / 1e9 / bw.copy_gbs,
                100.0 * bytes / best / 1e9 / bw.read_gbs);
  });
}

}  // namespace tkv
