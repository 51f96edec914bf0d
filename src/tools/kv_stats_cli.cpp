// `turbokv kv-stats`: the CLI over kv_stats() and kv_roundtrip().
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "codec/format.h"
#include "tools/json_text.h"
#include "eval/kv_stats.h"
#include "tools/subcommands.h"
#include "tools/synthetic_kv.h"

namespace tkv {
namespace {

struct KvStatsArgs {
  std::vector<std::string> kv_files;
  bool synthetic = false;
  int d = 128, n = 2048, heads = 2;
  uint64_t data_seed = 1;
  std::string formats = "all";
  uint64_t seed = kDefaultSeed;
  int queries = 64;
  bool json = false;
  std::string roundtrip;
  std::string out;
  bool mean_center = false;
  bool calibrated = false;
};

// --calibrated without --formats: plain and calibrated coding at equal sizes.
constexpr const char* kCalibratedDefault = "q4_0r,tq2,tqc2,tq3,tqc3,tq4,tqc4";  // valid at any d % 8 == 0

[[noreturn]] void fail(const std::string& msg) {
  std::cerr << "turbokv kv-stats: error: " << msg << "\n";
  throw CLI::RuntimeError(1);
}

void run_roundtrip(const KvStatsArgs& a) {
  if (a.kv_files.size() != 1) fail("--roundtrip needs exactly one --kv input file");
  if (a.out.empty()) fail("--roundtrip needs an output file: -o FILE");
  auto kv = read_kv_file(a.kv_files[0]);
  if (!kv) fail(kv.error());
  auto dec = kv_roundtrip(*kv, a.roundtrip, a.mean_center, a.seed);
  if (!dec) fail(a.kv_files[0] + ": " + dec.error());
  Status s = write_kv_file(a.out, *dec);
  if (!s.ok()) fail(s.message());
  std::cout << "wrote " << a.out << ": " << a.kv_files[0] << " coded as " << a.roundtrip
            << (a.mean_center ? " (mean-centred)" : "") << " and decoded\n";
}

void run_kv_stats(const KvStatsArgs& a) {
  if (!a.roundtrip.empty()) return run_roundtrip(a);
  if (a.mean_center) fail("--mean-center only applies to --roundtrip (kv-stats reports both variants)");
  if (a.kv_files.empty() && !a.synthetic) fail("give --kv FILE (repeatable) or --synthetic");
  auto formats = parse_format_list(a.calibrated && a.formats == "all" ? kCalibratedDefault : a.formats);
  if (!formats) fail(formats.error());
  KvStatsOptions opt;
  opt.calibrated = a.calibrated;
  opt.formats = *formats;
  opt.seed = a.seed;
  opt.queries = a.queries;

  nlohmann::json all = nlohmann::json::array();
  auto report = [&](const KvFile& kv, const std::string& source, const std::string& title) {
    auto rows = kv_stats(kv, source, opt);
    if (!rows) fail(rows.error());
    if (a.json) {
      for (auto& j : kv_stats_json(*rows)) all.push_back(std::move(j));
    } else {
      std::cout << title << "\n" << kv_stats_table(*rows) << "\n";
    }
  };
  if (a.synthetic) {
    if (double(a.n) * a.heads * a.d > double(1 << 28))
      fail("synthetic data of " + std::to_string(a.heads) + " x " + std::to_string(a.n) + " x " +
           std::to_string(a.d) + " values is too large (limit 2^28)");
    SyntheticKvOptions so;
    so.d = a.d;
    so.tokens = a.n;
    so.heads = a.heads;
    so.seed = a.data_seed;
    report(synthetic_kv(so), "synthetic",
           "synthetic keys: " + std::to_string(a.heads) + " heads x " + std::to_string(a.n) + " vectors, d = " +
               std::to_string(a.d) + " (channel RMS 0.2..6, ~half the energy in channel means)");
  }
  for (const auto& path : a.kv_files) {
    auto kv = read_kv_file(path);
    if (!kv) fail(kv.error());
    report(*kv, path,
           path + ": layer " + std::to_string(kv->layer) + ", " + std::to_string(kv->kv_heads) + " heads x " +
               std::to_string(kv->tokens) + " vectors, d = " + std::to_string(kv->head_dim));
  }
  if (a.json) std::cout << json_text(all, 2) << "\n";
}

}  // namespace

void register_kv_stats(CLI::App& app) {
  auto a = std::make_shared<KvStatsArgs>();
  CLI::App* sub = app.add_subcommand("kv-stats", "Measure the error of KV formats on head vectors");
  sub->footer(
      "Each format is reported plain and with exact mean centring (per head, mu = mean of the\n"
      "first 64 vectors). rel MSE = sum|x - x^|^2 / sum|x|^2; IP err and attn err are relative\n"
      "errors of q.k and of softmax(q.K/sqrt d) V over 64 random queries per head (Gaussian with\n"
      "the per-channel std of the vectors); RD ratio = rel MSE / 4^-bits.");
  sub->add_option("--kv", a->kv_files, "KV vector file (repeatable); each KV head is one group")
      ->take_all();
  sub->add_flag("--synthetic", a->synthetic, "Measure built-in synthetic keys with outlier channels");
  sub->add_option("--d", a->d, "Synthetic head dim")->capture_default_str()->check(CLI::Range(8, 1024));
  sub->add_option("--n", a->n, "Synthetic vectors per head")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--heads", a->heads, "Synthetic heads")->capture_default_str()->check(CLI::Range(1, 64));
  sub->add_option("--data-seed", a->data_seed, "Seed of the synthetic data")->capture_default_str();
  sub->add_option("--formats", a->formats, "Comma-separated formats, or all")->capture_default_str();
  sub->add_option("--seed", a->seed, "Rotation seed (also seeds the random queries)")->capture_default_str();
  sub->add_option("--queries", a->queries, "Random queries per head")->capture_default_str()->check(
      CLI::Range(1, 4096));
  sub->add_flag("--json", a->json, "Print a JSON list of objects instead of tables");
  sub->add_flag("--calibrated", a->calibrated,
                "Fit a per-head basis (tqc formats) and mean on the first half of each head's vectors and "
                "measure every format on the second half");
  sub->add_option("--roundtrip", a->roundtrip, "Write the --kv file coded and decoded with FORMAT to -o");
  sub->add_option("-o,--output", a->out, "Output file of --roundtrip");
  sub->add_flag("--mean-center", a->mean_center, "With --roundtrip: code x - mu and add mu back");
  sub->callback([a] { run_kv_stats(*a); });
}

}  // namespace tkv
