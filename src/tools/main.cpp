// turbokv: one binary, one subcommand per job (DESIGN.md 3). To add a subcommand,
// write `void register_NAME(CLI::App&)` in its own file, declare it in
// subcommands.h and call it below.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "tools/subcommands.h"

namespace {
constexpr const char* kVersion = "turbokv 0.1.0";
}

int main(int argc, char** argv) {
  CLI::App app{"turbokv: LLM inference with a compressed KV cache (rotation + Lloyd-Max codebooks)"};
  app.set_version_flag("--version", kVersion);
  // No require_subcommand(): it would be reported before an unknown flag.
  tkv::register_kv_stats(app);
  tkv::register_demo(app);
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
