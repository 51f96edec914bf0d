// The flags every tool has, described and defaulted once: -m (the model),
// -t (threads: default every core, as llama.cpp), --json-out, --no-progress.
// Cache flags (-ctk, -ctv, --kv-policy, --kv-preset) are in kv_flags.h.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace tkv {

// The machine's cores (at least 1): every tool's default thread count.
int default_threads();
// 0 (or less) means every core.
inline int resolve_threads(int t) { return t > 0 ? t : default_threads(); }

// -m,--model FILE (required unless `optional`).
CLI::Option* add_model_flag(CLI::App* cmd, std::string& path, bool optional = false);
// -t,--threads N, defaulting to every core; 0 also means every core.
CLI::Option* add_threads_flag(CLI::App* cmd, int& threads);
// The same for tools that sweep thread counts (bench, bench-attn): a
// comma-separated list, with the same description and default.
CLI::Option* add_threads_list_flag(CLI::App* cmd, std::string& list);
// --json-out FILE: append the results as JSON lines (for `turbokv report`).
CLI::Option* add_json_out_flag(CLI::App* cmd, std::string& path);
// --no-progress: no progress line (there is none anyway when stderr is not
// a terminal).
CLI::Option* add_no_progress_flag(CLI::App* cmd, bool& no_progress);

// A real-valued flag's range, lo <= value <= hi: CLI::Range lets NaN through
// (its comparisons with NaN are false), so every float flag checks with this.
CLI::Validator finite_range(double lo, double hi);

// The one description of -t, shared by every tool (tests compare --help).
std::string threads_help();

}  // namespace tkv
