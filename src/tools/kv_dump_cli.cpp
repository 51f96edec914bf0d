// `turbokv kv-dump -m M -f TEXT --layers L1,L2 -o DIR [-n TOKENS]`
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "eval/perplexity.h"
#include "tools/kv_dump.h"
#include "tools/common_flags.h"
#include "tools/subcommands.h"
#include "util/progress.h"
#include "util/text_file.h"

namespace tkv {

void register_kv_dump(CLI::App& app) {
  struct Opt {
    std::string model, file, out;
    std::vector<int> layers;
    int tokens = 512, threads = 0;
    bool no_progress = false;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("kv-dump", "Write a run's real K and V vectors in the KV file format");
  add_model_flag(cmd, o->model);
  cmd->add_option("-f,--file", o->file, "text file")->required();
  cmd->add_option("--layers", o->layers, "layers, comma separated")->required()->delimiter(',');
  cmd->add_option("-o,--output", o->out, "output directory")->required();
  cmd->add_option("-n,--tokens", o->tokens, "tokens to run (BOS included)")->check(CLI::Range(1, 1 << 20));
  add_threads_flag(cmd, o->threads);
  add_no_progress_flag(cmd, o->no_progress);
  cmd->callback([o]() {
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv kv-dump: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    auto text = read_text_file(o->file);
    if (!text) fail(text.error());
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    Progress progress("kv-dump", 0, "tokens", !o->no_progress);
    Status s = kv_dump(**m, normalize_newlines(*text), o->layers, o->tokens, o->out, resolve_threads(o->threads),
                       [&](int done, int total) {
                         progress.set_total(total);
                         progress.update(done);
                       });
    progress.done();
    if (!s.ok()) fail(s.message());
    std::cerr << "wrote " << o->layers.size() * 2 << " files to " << o->out << "\n";
  });
}

}  // namespace tkv
