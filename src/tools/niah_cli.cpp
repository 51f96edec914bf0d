// `turbokv niah -m M --haystack DIR --contexts 1024,2048 --depths 0,10,...,100
// [-ctk F] [-ctv F] [--trials N] [--seed S] [--svg OUT.svg] [--json-out FILE]`
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "codec/format.h"
#include "eval/niah.h"
#include "eval/perplexity.h"
#include "tools/common_flags.h"
#include "tools/json_text.h"
#include "util/progress.h"
#include "tools/kv_flags.h"
#include "tools/subcommands.h"
#include "util/text_file.h"

namespace tkv {

void register_niah(CLI::App& app) {
  struct Opt {
    std::string model, haystack, svg = "niah.svg", json_out;
    std::vector<int> contexts{1024, 2048}, depths{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
    int trials = 1, threads = 0;
    bool no_progress = false;
    uint64_t seed = 1;
    CacheFlags cache{"tq4", "tq4"};
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("niah", "Needle in a haystack: exact recall of a 7-digit number per context and depth");
  add_model_flag(cmd, o->model);
  cmd->add_option("--haystack", o->haystack, "directory of .txt files (concatenated by name)")->required();
  cmd->add_option("--contexts", o->contexts, "context lengths")->delimiter(',');
  cmd->add_option("--depths", o->depths, "needle depths in % of the haystack")->delimiter(',');
  cmd->add_option("--trials", o->trials, "needles per cell")->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", o->seed, "seed of the numbers");
  add_threads_flag(cmd, o->threads);
  add_cache_flags(cmd, o->cache);
  cmd->add_option("--svg", o->svg, "heat map output");
  add_json_out_flag(cmd, o->json_out);
  add_no_progress_flag(cmd, o->no_progress);
  cmd->callback([o]() {
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv niah: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(o->haystack, ec))
      if (e.path().extension() == ".txt") files.push_back(e.path());
    if (ec) fail(o->haystack + ": " + ec.message());
    if (files.empty()) fail(o->haystack + ": no .txt files");
    std::sort(files.begin(), files.end());
    std::string text;
    for (const auto& p : files) {
      auto t = read_text_file(p.string());
      if (!t) fail(t.error());
      text += normalize_newlines(*t) + "\n";
    }
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    NiahOptions no;
    no.contexts = o->contexts;
    no.depths = o->depths;
    no.trials = o->trials;
    no.seed = o->seed;
    no.threads = resolve_threads(o->threads);
    if (Status ks = apply_cache_flags(o->cache, **m, no.cache); !ks.ok()) fail(ks.message());
    auto bits = cache_bits_per_value(no.cache, **m);
    if (!bits) fail(bits.error());
    Progress progress("niah", 0, "needles", !o->no_progress);
    auto cells = niah_run(**m, text, no, [&](int i, int n) {
      progress.set_total(n);
      progress.update(i);
    });
    progress.done();
    if (!cells) fail(cells.error());
    // Grid: depth rows, context columns, found/trials.
    std::map<std::pair<int, int>, std::pair<int, int>> grid;
    int found = 0;
    for (const auto& c : *cells) {
      auto& g = grid[{c.depth, c.context}];
      g.first += c.score == NiahScore::kFound;
      g.second += 1;
      found += c.score == NiahScore::kFound;
    }
    std::printf("needle in a haystack: %s, cache K %s V %s (found / trials)\n%8s", o->model.c_str(),
                o->cache.k_label().c_str(), o->cache.v_label().c_str(), "depth");
    for (int cx : o->contexts) std::printf(" %8d", cx);
    std::printf("\n");
    for (int d : o->depths) {
      std::printf("%7d%%", d);
      for (int cx : o->contexts) std::printf(" %6d/%d", grid[{d, cx}].first, grid[{d, cx}].second);
      std::printf("\n");
    }
    std::printf("total: %d / %zu found\n", found, cells->size());
    const std::string title = "needle in a haystack, " +
                              (o->cache.kv.any() ? o->cache.kv.label() : o->cache.ctk + "/" + o->cache.ctv);
    std::ofstream svg(o->svg);
    if (!svg) fail(o->svg + ": cannot write");
    svg << niah_svg(*cells, title);
    if (!o->json_out.empty()) {
      nlohmann::json j = {{"tool", "niah"}, {"model", o->model}, {"type_k", o->cache.k_label()}, {"type_v", o->cache.v_label()},
                          {"found", found}, {"total", cells->size()}, {"command_line", command_line()}};
      j["bits_per_value"] = 0.5 * (bits->first + bits->second);
      if (o->cache.kv.any()) j["kv_policy"] = o->cache.kv.label();
      nlohmann::json cs = nlohmann::json::array();
      for (const auto& c : *cells)
        cs.push_back({{"context", c.context}, {"depth", c.depth}, {"trial", c.trial}, {"number", c.number},
                      {"answer", c.answer}, {"score", niah_score_name(c.score)}});
      j["cells"] = cs;
      std::ofstream out(o->json_out, std::ios::app);
      out << json_text(j) << "\n";
    }
  });
}

}  // namespace tkv
