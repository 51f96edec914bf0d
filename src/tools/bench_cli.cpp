// `turbokv bench -m M [-p 512] [-n 128] [-d 0,4096] [-ctk f16,q8_0,tq4] [-ctv ...]
// [-t 2] [-r 3] [-o md|csv|json] [--json-out FILE] [--matmul old,new]`: llama-bench's tests and
// table (pp = prompt processing, tg = generation, "@ dN" at a depth of N
// tokens already in the cache), every combination, mean ± sd over -r runs,
// plus the KV cache MiB of each run. Progress goes to stderr.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "matmul/matmul.h"
#include "model/model.h"
#include "tools/common_flags.h"
#include "tools/json_text.h"
#include "tools/arg_lists.h"
#include "tools/kv_flags.h"
#include "tools/subcommands.h"
#include "util/progress.h"
#include "util/rng.h"

namespace tkv {

void register_bench(CLI::App& app) {
  struct Opt {
    std::string model, p = "512", n = "128", d = "0", ctk = "f16,q8_0,tq4", ctv, t, out = "md", json_out, matmul;
    int reps = 3;
    bool no_progress = false;
    std::string depth_fill = "model";
    KvPolicyFlags kv;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("bench", "llama-bench style speed table over cache formats and depths");
  cmd->footer("-p, -n, -d, -t, -ctk and -ctv take comma-separated lists: every combination is run.");
  add_model_flag(cmd, o->model);
  cmd->add_option("-p,--n-prompt", o->p, "prompt lengths (0 = no pp test)");
  cmd->add_option("-n,--n-gen", o->n, "generation lengths (0 = no tg test)");
  cmd->add_option("-d,--n-depth", o->d, "tokens already in the cache");
  cmd->add_option("--cache-type-k", o->ctk, "K formats (-ctk)");
  add_kv_policy_flags(cmd, o->kv);
  cmd->add_option("--cache-type-v", o->ctv, "V formats (-ctv); default: the same as K, paired");
  add_threads_list_flag(cmd, o->t);
  cmd->add_option("-r,--repetitions", o->reps, "runs per test")->check(CLI::Range(1, 1000));
  cmd->add_option("-o,--output", o->out, "md, csv or json")->check(CLI::IsMember({"md", "csv", "json"}));
  add_json_out_flag(cmd, o->json_out);
  add_no_progress_flag(cmd, o->no_progress);
  cmd->add_option("--matmul", o->matmul,
                  "matrix-multiply cores to compare, each test run with each in turn: old (row streaming), new "
                  "(auto), tiled, int8 (default: TKV_MATMUL or new, not shown in the table)");
  cmd->add_option("--depth-fill", o->depth_fill,
                  "how the depth is filled: model (real forward passes, like llama-bench) or random (random K/V rows "
                  "written straight to the cache: the same attention work, minutes faster on big models)")
      ->check(CLI::IsMember({"model", "random"}));
  cmd->callback([o]() {
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv bench: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    std::vector<int> ps, ns, ds, ts;
    try {
      ps = parse_int_list(o->p, "-p", 0);
      ns = parse_int_list(o->n, "-n", 0);
      ds = parse_int_list(o->d, "-d", 0);
      ts = parse_threads_list(o->t, default_threads());
    } catch (const std::exception& e) {
      fail(e.what());
    }
    std::vector<std::pair<std::string, MatmulCore>> cores;  // (label, core); label "" = not shown
    if (o->matmul.empty()) cores.push_back({"", matmul_core()});
    for (const auto& name : split_list(o->matmul)) {
      auto core = parse_matmul_core(name);
      if (!core) fail(core.error());
      cores.push_back({name, *core});
    }
    const auto ks = split_list(o->ctk);
    const auto vs = o->ctv.empty() ? ks : split_list(o->ctv);
    std::vector<std::pair<std::string, std::string>> pairs;
    if (o->kv.any()) {  // one per-layer configuration instead of -ctk/-ctv pairs
      pairs.push_back({o->kv.label(), o->kv.label()});
    } else if (o->ctv.empty()) {
      for (const auto& k : ks) pairs.push_back({k, k});
    } else {
      for (const auto& k : ks)
        for (const auto& v : vs) pairs.push_back({k, v});
    }
    // Protected tokens are not a format of their own: shown after K's and V's.
    const std::string prot = o->kv.protect.empty() ? "" : " +protect " + o->kv.protect;
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    const Model& model = **m;
    const ModelConfig& c = model.config();
    uint64_t params = 0;
    for (const auto& t : model.file().tensors()) params += t.n_elements;
    char model_name[128];
    std::snprintf(model_name, sizeof(model_name), "%s %.2fM %s", c.arch.c_str(), params / 1e6,
                  model.weight_type().c_str());
    nlohmann::json results = nlohmann::json::array();
    const bool md = o->out == "md";
    if (md) {
      std::printf("| model | size | params | threads | type_k | type_v | test | t/s | KV MiB |\n");
      std::printf("| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |\n");
    } else if (o->out == "csv") {
      std::printf("model,size_bytes,params,threads,type_k,type_v,test,n_prompt,n_gen,n_depth,avg_ts,stddev_ts,kv_mib\n");
    }
    using clock = std::chrono::steady_clock;
    std::vector<float> logits(c.n_vocab);
    int64_t tests = 0;
    for (int len : ps) tests += len > 0;
    for (int len : ns) tests += len > 0;
    Progress progress("bench", int64_t(pairs.size()) * ts.size() * ds.size() * tests * cores.size() * (o->reps + 1),
                      "runs", !o->no_progress);
    int64_t runs = 0;
    for (const auto& [tk, tv] : pairs)
      for (int th : ts)
        for (int d : ds)
          for (int mode = 0; mode < 2; ++mode)
            for (int len : (mode == 0 ? ps : ns)) {
              if (len == 0) continue;
              for (const auto& mm : cores) {
                set_matmul_core(mm.second);
                std::vector<double> tps;
                double kv_mib = 0, k_bits = 0, v_bits = 0;
                for (int r = -1; r < o->reps; ++r) {  // r = -1: an unrecorded warm-up run
                  progress.update(runs, tk + "/" + tv + " t=" + std::to_string(th) + " " + (mode == 0 ? "pp" : "tg") +
                                            std::to_string(len) + " @ d" + std::to_string(d) +
                                            (r < 0 ? " warm-up" : " run " + std::to_string(r + 1)));
                  KvCacheOptions co;
                  co.type_k = tk;
                  co.type_v = tv;
                  co.capacity = d + len + 1;
                  if (Status ks = apply_kv_policy_flags(o->kv, model, co); !ks.ok()) fail(ks.message());
                  auto cache = KvCache::create(c.kv_shape(), co);
                  if (!cache) fail(cache.error());
                  kv_mib = ((*cache)->k_bytes() + (*cache)->v_bytes() + (*cache)->state_bytes()) / 1048576.0;
                  k_bits = (*cache)->k_bits_per_value();
                  v_bits = (*cache)->v_bits_per_value();
                  std::vector<int32_t> toks(d + len);
                  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7919 + 13) % c.n_vocab);
                  if (o->depth_fill == "model") {
                    for (int b0 = 0; b0 < d; b0 += 512) {  // the depth: real forward passes, untimed
                      Status s = model.forward(&toks[b0], std::min(512, d - b0), b0, **cache, th, logits.data());
                      if (!s.ok()) fail(s.message());
                    }
                  } else if (d > 0) {  // random rows of unit scale in every layer, untimed
                    Rng rng(7);
                    std::vector<float> kv(size_t(std::min(d, 512)) * c.n_head_kv * c.head_dim);
                    for (auto& x : kv) x = static_cast<float>(rng.gaussian());
                    for (int l = 0; l < (*cache)->n_layer(); ++l)  // a ring takes a few tokens at a time
                      for (int b0 = 0, step = (*cache)->layout().append_step(l) > 0 ? (*cache)->layout().append_step(l) : 512;
                           b0 < d; b0 += step) {
                        Status s = (*cache)->append(l, b0, std::min(step, d - b0), kv.data(), kv.data());
                        if (!s.ok()) fail(s.message());
                      }
                  }
                  const auto t0 = clock::now();
                  if (mode == 0) {
                    for (int b0 = 0; b0 < len; b0 += 512) {
                      Status s = model.forward(&toks[d + b0], std::min(512, len - b0), d + b0, **cache, th, logits.data());
                      if (!s.ok()) fail(s.message());
                    }
                  } else {
                    for (int i = 0; i < len; ++i) {
                      Status s = model.forward(&toks[d + i], 1, d + i, **cache, th, logits.data());
                      if (!s.ok()) fail(s.message());
                    }
                  }
                  if (r >= 0) tps.push_back(len / std::chrono::duration<double>(clock::now() - t0).count());
                  ++runs;
                }
                progress.clear();  // the table row below starts on a clean line; the next run draws again
                double mean = 0, sd = 0;
                for (double x : tps) mean += x / tps.size();
                for (double x : tps) sd += (x - mean) * (x - mean);
                sd = tps.size() > 1 ? std::sqrt(sd / (tps.size() - 1)) : 0.0;
                const std::string test = std::string(mode == 0 ? "pp" : "tg") + std::to_string(len) +
                                         (d > 0 ? " @ d" + std::to_string(d) : "") +
                                       (mm.first.empty() ? "" : " matmul " + mm.first);
                nlohmann::json j = {{"model", model_name}, {"model_file", o->model}, {"size_bytes", model.weight_bytes()},
                                    {"params", params}, {"threads", th}, {"type_k", tk + prot}, {"type_v", tv + prot}, {"test", test},
                                    {"n_prompt", mode == 0 ? len : 0}, {"n_gen", mode == 1 ? len : 0}, {"n_depth", d},
                                    {"avg_ts", mean}, {"stddev_ts", sd}, {"samples_ts", tps}, {"kv_mib", kv_mib},
                                    {"depth_fill", o->depth_fill}, {"command_line", command_line()},
                                    {"bits_per_value", 0.5 * (k_bits + v_bits)},
                                    {"matmul", matmul_core_name(mm.second)}};
                results.push_back(j);
                if (md) {
                  std::printf("| %s | %.2f MiB | %.2f M | %d | %s | %s | %s | %.2f ± %.2f | %.2f |\n", model_name,
                              model.weight_bytes() / 1048576.0, params / 1e6, th, (tk + prot).c_str(), (tv + prot).c_str(), test.c_str(), mean,
                              sd, kv_mib);
                } else if (o->out == "csv") {
                  std::printf("\"%s\",%zu,%lu,%d,%s,%s,\"%s\",%d,%d,%d,%.4f,%.4f,%.4f\n", model_name, model.weight_bytes(),
                              static_cast<unsigned long>(params), th, (tk + prot).c_str(), (tv + prot).c_str(), test.c_str(),
                              mode == 0 ? len : 0, mode == 1 ? len : 0, d, mean, sd, kv_mib);
                }
                std::fflush(stdout);
                if (!o->json_out.empty()) {
                  std::ofstream out(o->json_out, std::ios::app);
                  j["tool"] = "bench";
                  out << json_text(j) << "\n";
                }
              }
            }
    progress.done();
    if (o->out == "json") std::cout << json_text(results, 2) << "\n";
  });
}

}  // namespace tkv
