// tools/: the turbokv binary's subcommands. The top: it may include every
// library; nothing includes it.
//
// Every `turbokv` subcommand registers itself on the top-level app with one
// function defined in its own file; main.cpp calls them all. A subcommand's
// callback reports failures on stderr and throws CLI::RuntimeError(1), which
// main turns into exit code 1 (never an abort).
#pragma once

namespace CLI {
class App;
}

#include <string>

namespace tkv {

// The one error path of every subcommand: "turbokv CMD: error: MSG" on
// stderr, then CLI::RuntimeError(1) (exit code 1).
[[noreturn]] void fail_command(const std::string& cmd, const std::string& msg);

// The command line of this run, for the JSON lines of --json-out.
const std::string& command_line();
void set_command_line(int argc, char** argv);

void register_kv_stats(CLI::App& app);  // kv_stats_cli.cpp
void register_demo(CLI::App& app);      // demo.cpp
void register_bench_attn(CLI::App& app);  // bench_attn.cpp
void register_codebook(CLI::App& app);    // codebook_cli.cpp
void register_inspect(CLI::App& app);     // inspect_cli.cpp
void register_tokenize(CLI::App& app);    // tokenize_cli.cpp
void register_run(CLI::App& app);         // run_cli.cpp
void register_gen_model(CLI::App& app);   // gen_model_cli.cpp
void register_bench_model(CLI::App& app); // bench_model_cli.cpp
void register_perplexity(CLI::App& app);  // perplexity_cli.cpp
void register_kv_dump(CLI::App& app);     // kv_dump_cli.cpp
void register_bench(CLI::App& app);       // bench_cli.cpp
void register_niah(CLI::App& app);        // niah_cli.cpp
void register_report(CLI::App& app);       // report_cli.cpp
void register_calibrate(CLI::App& app);    // calibrate_cli.cpp
void register_cache(CLI::App& app);        // cache_cli.cpp
void register_serve(CLI::App& app);        // serve_cli.cpp
void register_bench_serve(CLI::App& app);  // bench_serve_cli.cpp
void register_loadgen(CLI::App& app);      // loadgen_cli.cpp

}  // namespace tkv
