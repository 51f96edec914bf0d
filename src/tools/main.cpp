// turbokv: one binary, one subcommand per job (DESIGN.md 3). To add a subcommand,
// write `void register_NAME(CLI::App&)` in its own file, declare it in
// subcommands.h and call it below.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/subcommands.h"
#include "turbokv.h"  // the version, one number for the binary and the library

namespace {
#define TKV_STR2(x) #x
#define TKV_STR(x) TKV_STR2(x)
constexpr const char* kVersion =
    "turbokv " TKV_STR(TKV_VERSION_MAJOR) "." TKV_STR(TKV_VERSION_MINOR) "." TKV_STR(TKV_VERSION_PATCH);
}

// llama.cpp's multi-letter single-dash flags, which CLI11 cannot declare.
const char* llama_alias(const std::string& a) {
  if (a == "-ctk") return "--cache-type-k";
  if (a == "-ctv") return "--cache-type-v";
  if (a == "-np") return "--parallel";
  return nullptr;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (auto& a : args)
    if (const char* alias = llama_alias(a)) a = alias;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argc = static_cast<int>(argp.size());
  argv = argp.data();
  tkv::set_command_line(argc, argv);
  CLI::App app{"turbokv: LLM inference with a compressed KV cache (rotation + Lloyd-Max codebooks)"};
  app.set_version_flag("--version", kVersion);
  // No require_subcommand(): it would be reported before an unknown flag.
  tkv::register_kv_stats(app);
  tkv::register_cache(app);
  tkv::register_serve(app);
  tkv::register_bench_serve(app);
  tkv::register_loadgen(app);
  tkv::register_demo(app);
  tkv::register_bench_attn(app);
  tkv::register_codebook(app);
  tkv::register_inspect(app);
  tkv::register_tokenize(app);
  tkv::register_run(app);
  tkv::register_gen_model(app);
  tkv::register_bench_model(app);
  tkv::register_perplexity(app);
  tkv::register_kv_dump(app);
  tkv::register_bench(app);
  tkv::register_niah(app);
  tkv::register_report(app);
  tkv::register_calibrate(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {  // e.g. out of memory: report, never abort
    std::cerr << "turbokv: error: " << e.what() << "\n";
    return 1;
  }
  if (app.get_subcommands().empty()) {
    std::cerr << app.help() << "\nturbokv: error: give a subcommand\n";
    return 1;
  }
  return 0;
}
