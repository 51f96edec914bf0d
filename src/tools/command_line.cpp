#include <string>

#include "tools/subcommands.h"

namespace tkv {
namespace {
std::string g_command_line;
}

const std::string& command_line() { return g_command_line; }

void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(argv[i]);
}

}  // namespace tkv
