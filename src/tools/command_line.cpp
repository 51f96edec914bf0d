#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/subcommands.h"

namespace tkv {
namespace {
std::string g_command_line;
}

void fail_command(const std::string& cmd, const std::string& msg) {
  std::cerr << "turbokv " << cmd << ": error: " << msg << "\n";
  throw CLI::RuntimeError(1);
}

const std::string& command_line() { return g_command_line; }

void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; ++i) {
    if (i) g_command_line += ' ';
    g_command_line += argv[i];
  }
}

}  // namespace tkv
