#include "tools/common_flags.h"

#include <algorithm>
#include <thread>

namespace tkv {

int default_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::string threads_help() {
  return "threads (default 0: every core, " + std::to_string(default_threads()) + " here)";
}

CLI::Option* add_model_flag(CLI::App* cmd, std::string& path, bool optional) {
  auto* o = cmd->add_option("-m,--model", path, "GGUF model file");
  if (!optional) o->required();
  return o;
}

CLI::Option* add_threads_flag(CLI::App* cmd, int& threads) {
  threads = 0;
  return cmd->add_option("-t,--threads", threads, threads_help())->check(CLI::Range(0, 1024));
}

CLI::Option* add_threads_list_flag(CLI::App* cmd, std::string& list) {
  list = "0";
  return cmd->add_option("-t,--threads", list, threads_help());
}

CLI::Option* add_json_out_flag(CLI::App* cmd, std::string& path) {
  return cmd->add_option("--json-out", path, "append the results to FILE as JSON lines (for turbokv report)");
}

CLI::Option* add_no_progress_flag(CLI::App* cmd, bool& no_progress) {
  return cmd->add_flag("--no-progress", no_progress,
                       "no progress line on stderr (none is drawn anyway when stderr is not a terminal)");
}

CLI::Validator finite_range(double lo, double hi) {
  const std::string range = CLI::detail::to_string(lo) + " to " + CLI::detail::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "Value " + text + " is not a number";
        if (!(v >= lo && v <= hi)) return "Value " + text + " not in range " + range;  // (NaN too)
        return {};
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

}  // namespace tkv
