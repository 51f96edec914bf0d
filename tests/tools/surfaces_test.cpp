// What a person sees (issue 18): the report's charts (tick labels that
// differ, log axes ranged by the non-zero points, one legend entry and one
// colour per cache type, error bars, the numbers under each chart), progress
// lines (stderr only, carriage returns only on a terminal, --no-progress),
// `run`'s text before its statistics, and one -t default and description in
// every tool.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "eval/report.h"
#include "test_models.h"
#include "tools/common_flags.h"
#include "util/progress.h"
#include "temp_path.h"

namespace tkv {
namespace {

std::string run_cmd(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int r = p ? pclose(p) : -1;
  if (rc) *rc = r;
  return out;
}

std::string read_file(const std::string& path) {
  std::string s;
  FILE* f = std::fopen(path.c_str(), "rb");
  char buf[4096];
  size_t n;
  while (f && (n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  if (f) std::fclose(f);
  return s;
}

// The <figure> of each chart: its SVG, caption and table.
std::vector<std::string> figures(const std::string& html) {
  std::vector<std::string> out;
  for (size_t p = html.find("<figure class=\"chart\">"); p != std::string::npos;
       p = html.find("<figure class=\"chart\">", p + 1))
    out.push_back(html.substr(p, html.find("</figure>", p) - p));
  return out;
}

std::vector<std::string> texts(const std::string& svg, const std::string& cls) {
  std::vector<std::string> out;
  const std::regex re("<text class=\"" + cls + "\"[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

// Legend entries: name -> colour.
std::map<std::string, std::string> legend(const std::string& svg, int* entries) {
  std::map<std::string, std::string> out;
  const std::regex re("<g class=\"legend-entry\"><rect[^>]*fill=\"([^\"]*)\"/><text[^>]*>([^<]*)</text></g>");
  *entries = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    out[(*it)[2]] = (*it)[1];
    ++*entries;
  }
  return out;
}

std::vector<nlohmann::json> fixed_results() {
  std::vector<nlohmann::json> rows;
  auto ppl = [&](const char* t, double bits, double p, double kld, bool centred) {
    rows.push_back({{"tool", "perplexity"}, {"type_k", t}, {"type_v", t}, {"bits_per_value", bits}, {"ppl", p},
                    {"ppl_err", 2.1}, {"mean_center", centred}, {"ctx", 512}, {"chunks", 40},
                    {"kld", {{"mean", kld}, {"mean_err", kld * 0.05}}}});
  };
  // Four perplexities within 1.1 of each other (the "177, 177, 176, 176").
  ppl("f16", 16, 176.21, 0.0, true);
  ppl("q8_0", 8.5, 176.34, 0.00031, true);
  ppl("tq4", 4.125, 176.92, 0.0029, true);
  ppl("tq3", 3.125, 177.30, 0.011, true);
  ppl("tq4", 4.125, 177.10, 0.0041, false);
  ppl("bf16", 16, 176.20, 3e-8, true);  // real, but 5 decades below the rest
  auto bench = [&](const char* t, int depth, std::vector<double> s) {
    double mean = 0;
    for (double v : s) mean += v / s.size();
    rows.push_back({{"tool", "bench"}, {"type_k", t}, {"type_v", t}, {"n_gen", 16}, {"n_depth", depth},
                    {"avg_ts", mean}, {"stddev_ts", 1.0}, {"samples_ts", s}, {"threads", 2},
                    {"test", "tg16 @ d" + std::to_string(depth)}});
  };
  bench("f16", 0, {101, 99, 100});
  bench("f16", 4096, {61, 58, 60});
  bench("tq4", 0, {120, 118, 125});
  bench("tq4", 4096, {110, 104, 109});
  rows.push_back({{"tool", "perplexity"}, {"type_k", "tq2"}, {"type_v", "tq2"}, {"bits_per_value", 2.1},
                  {"ppl", "not a number"}});
  return rows;
}

TEST(Report, TickLabelsDifferAndHaveTheDigitsTheRangeNeeds) {
  int dec = 0;
  const auto t = nice_ticks(176.21, 177.30, 6, &dec);
  const auto l = tick_labels(t, dec, false);
  EXPECT_GE(l.size(), 4u);
  EXPECT_EQ(std::set<std::string>(l.begin(), l.end()).size(), l.size());
  EXPECT_LE(t.front(), 176.21);
  EXPECT_GE(t.back(), 177.30);
  EXPECT_EQ(l.front(), "176.0") << "0.5 steps need one decimal";
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0, 1}, {3.1, 16}, {0.00012, 0.00019}, {5, 5}, {-3, 2}}) {
    const auto tt = nice_ticks(lo, hi, 6, &dec);
    const auto ll = tick_labels(tt, dec, false);
    EXPECT_EQ(std::set<std::string>(ll.begin(), ll.end()).size(), ll.size()) << lo << ".." << hi;
    const double eps = 1e-9 * std::max(1.0, std::fabs(hi));
    EXPECT_LE(tt.front(), lo + eps);
    EXPECT_GE(tt.back(), hi - eps);
    EXPECT_LE(tt.size(), 12u);
  }
}

TEST(Report, ChartsFollowTheConventionsOfBenchmarkPlots) {
  const std::string html = report_html(fixed_results(), 1);
  const auto figs = figures(html);
  ASSERT_EQ(figs.size(), 4u);  // PPL, KLD, generation, prompt processing
  const std::string &ppl = figs[0], &kld = figs[1], &tg = figs[2];
  // Tick labels unique per axis, units on every axis.
  for (const auto& f : {ppl, kld, tg}) {
    for (const char* axis : {"tick-x", "tick-y"}) {
      const auto l = texts(f, axis);
      EXPECT_GE(l.size(), 3u) << axis;
      EXPECT_EQ(std::set<std::string>(l.begin(), l.end()).size(), l.size()) << axis << " in\n" << f;
    }
    EXPECT_EQ(texts(f, "axis-label").size(), 2u);
  }
  EXPECT_NE(ppl.find("KV bits per value"), std::string::npos);
  EXPECT_NE(tg.find("tokens/s"), std::string::npos);
  EXPECT_NE(kld.find("nats"), std::string::npos);
  // The log axis is ranged by the non-zero KLDs (0.00031 .. 0.011 with their
  // error bars): a decade below the smallest, not f16's zero at a floor.
  const auto ky = texts(kld, "tick-y");
  EXPECT_EQ(std::stod(ky.front()), 1e-4) << ky.front();
  EXPECT_EQ(std::stod(ky.back()), 0.1) << ky.back();
  EXPECT_NE(kld.find("Not drawn"), std::string::npos);
  EXPECT_NE(kld.find("f16/f16"), std::string::npos) << "the zero is listed";
  EXPECT_NE(kld.find("bf16/bf16 (c 512, 40 chunks): 3e-08"), std::string::npos) << "far below the rest: listed";
  // One legend entry per series, one colour per cache type in every chart.
  int n = 0;
  const auto lp = legend(ppl, &n);
  EXPECT_EQ(n, 5);
  EXPECT_EQ(lp.size(), 5u);
  const auto lk = legend(kld, &n);
  EXPECT_EQ(n, 5) << "f16 is in the legend; its zero is listed, not drawn";
  const auto lt = legend(tg, &n);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(lt.at("tq4/tq4"), lp.at("tq4/tq4"));
  EXPECT_EQ(lt.at("f16/f16"), lp.at("f16/f16"));
  EXPECT_EQ(lk.at("tq3/tq3"), lp.at("tq3/tq3"));
  std::set<std::string> colours;
  for (const auto& [k, c] : lp) colours.insert(c);
  EXPECT_EQ(colours.size(), 5u);
  // The uncentred variant is a hollow marker of the same series, explained.
  EXPECT_NE(ppl.find("fill=\"white\""), std::string::npos);
  EXPECT_NE(ppl.find("hollow: mean centring off"), std::string::npos);
  // Error bars: ± the standard error, the min-max of repeated runs.
  size_t bars = 0;
  for (size_t p = tg.find("class=\"error-bar\""); p != std::string::npos; p = tg.find("class=\"error-bar\"", p + 1)) ++bars;
  EXPECT_EQ(bars, 4u);
  EXPECT_NE(tg.find("104 .. 110"), std::string::npos) << "min-max of tq4 @ 4096";
  // The numbers under each chart.
  for (const auto& f : {ppl, kld, tg}) EXPECT_NE(f.find("<table class=\"numbers\">"), std::string::npos);
  EXPECT_NE(ppl.find("<td>176.92</td>"), std::string::npos);
  // A result with a field of the wrong type is left out and counted.
  EXPECT_NE(html.find("1 of them left out"), std::string::npos);
}

TEST(Progress, LineHasCountRateAndEta) {
  EXPECT_EQ(Progress::line("bench", 3, 12, "runs", 0.5, "tq4/tq4 tg16"),
            "bench: 3/12 (25 %) runs, 0.50 runs/s, ETA 0:18, tq4/tq4 tg16");
  EXPECT_EQ(Progress::line("calibrate", 2, 0, "steps", 2.0, ""), "calibrate: 2 steps, 2.00 steps/s");
  EXPECT_EQ(Progress::line("perplexity", 40, 40, "chunks", 0.5, "PPL 17.2"), "perplexity: 40/40 (100 %) chunks, 0.50 chunks/s, PPL 17.2");
  EXPECT_EQ(Progress::line("niah", 1, 22, "needles", 0, ""), "niah: 1/22 (5 %) needles") << "no rate before a second update";
  EXPECT_EQ(Progress::line("kv-dump", 5000, 9000, "tokens", 1234.0, ""), "kv-dump: 5000/9000 (56 %) tokens, 1234 tokens/s, ETA 0:03");
}

std::string tiny_model() {
  static const TempPath file("tkv_surfaces_model.gguf");  // removed at exit
  static const std::string path = small_model(file);
  return path;
}

TEST(Progress, OnlyOnATerminalAndNeverInTheResults) {
  const std::string m = tiny_model();
  const TempPath err_path("tkv_bench_err.txt");
  const std::string& err = err_path;
  const std::string bench = std::string(TKV_BINARY) + " bench -m " + m + " -p 16 -n 4 -d 0,8 -t 1 -r 2 -ctk f16,tq4";
  int rc = 0;
  // stderr to a file: no carriage returns (no progress at all); stdout a clean
  // markdown table.
  const std::string md = run_cmd(bench + " -o md 2>" + err, &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(read_file(err).find('\r'), std::string::npos) << read_file(err);
  size_t lines = 0, start = 0;
  for (size_t eol = md.find('\n'); eol != std::string::npos; start = eol + 1, eol = md.find('\n', start)) {
    const std::string line = md.substr(start, eol - start);
    ASSERT_EQ(line.front(), '|') << line;
    ASSERT_EQ(line.back(), '|') << line;
    int bars = 0;
    for (char c : line) bars += c == '|';
    EXPECT_EQ(bars, 10) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 2u + 8u);
  EXPECT_EQ(md.find('\r'), std::string::npos);
  // On a terminal (script(1) gives the command a pty): progress lines,
  // rewritten with carriage returns; --no-progress: none.
  const std::string tty = run_cmd("script -qec '" + bench + " -o md' /dev/null 2>&1", &rc);
  ASSERT_EQ(rc, 0) << tty;
  EXPECT_NE(tty.find("\rbench: "), std::string::npos) << tty;
  EXPECT_NE(tty.find(" runs/s"), std::string::npos) << tty;
  const std::string quiet = run_cmd("script -qec '" + bench + " -o md --no-progress' /dev/null 2>&1", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(quiet.find("bench: "), std::string::npos) << quiet;
}

TEST(Run, StatisticsStartOnTheirOwnLine) {
  int rc = 0;
  const std::string out =
      run_cmd(std::string(TKV_BINARY) + " run -m " + tiny_model() + " -p hello -n 4 --temp 0 -t 1 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  const size_t stats = out.find("prompt: ");
  ASSERT_NE(stats, std::string::npos) << out;
  ASSERT_GT(stats, 0u);
  EXPECT_EQ(out[stats - 1], '\n') << out;
}

TEST(Flags, ThreadsHaveOneDefaultAndOneDescriptionInEveryTool) {
  const std::vector<std::string> tools = {"run",       "perplexity",  "bench",       "bench-attn",  "bench-model",
                                          "bench-serve", "niah",      "calibrate",   "kv-dump",     "serve",
                                          "cache build", "cache bench"};
  const std::string want = threads_help();
  EXPECT_NE(want.find(std::to_string(default_threads()) + " here"), std::string::npos);
  for (const auto& t : tools) {
    const std::string help = run_cmd(std::string(TKV_BINARY) + " " + t + " --help 2>&1");
    const size_t at = help.find("-t,--threads");
    ASSERT_NE(at, std::string::npos) << t << ":\n" << help;
    // The option and its description (CLI11 puts a long option's description
    // on the next line).
    const size_t eol = help.find('\n', at);
    const std::string entry = help.substr(at, help.find('\n', eol + 1) - at);
    EXPECT_NE(entry.find(want), std::string::npos) << t << ": " << entry;
    if (t != "bench-attn") {
      EXPECT_NE(help.find("-m,--model"), std::string::npos) << t;
    }
  }
}

// Real-valued flags refuse NaN by name (CLI::Range's comparisons let it
// through: --temp nan used to sample with a NaN temperature), and keep their
// bounds.
TEST(Flags, RealValuedRangesRefuseNaN) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run -m x.gguf", "--temp"},           {"run -m x.gguf", "--top-p"},
      {"run -m x.gguf", "--min-p"},          {"run -m x.gguf", "--repeat-penalty"},
      {"bench-attn", "--min-time"},          {"gen-model -o x.gguf", "--yarn-factor"},
      {"calibrate -m x.gguf", "--bits"},     {"gen-model -o x.gguf", "--embedding-scale"},
      {"gen-model -o x.gguf", "--residual-scale"}, {"gen-model -o x.gguf", "--attention-scale"},
      {"gen-model -o x.gguf", "--logit-scale"}};
  for (const auto& [tool, flag] : cases)
    for (const char* v : {"nan", "NaN", "-nan", "inf", "-1e-300", "1e300"}) {
      int rc = 0;
      const std::string err = run_cmd(std::string(TKV_BINARY) + " " + tool + " " + flag + " " + v + " 2>&1", &rc);
      EXPECT_NE(rc, 0) << tool << " " << flag << " " << v;
      EXPECT_NE(err.find(flag + ": Value " + v + " not in range"), std::string::npos) << tool << " " << flag << ": " << err;
    }
  int rc = 0;
  const std::string err = run_cmd(std::string(TKV_BINARY) + " bench-attn --min-time x 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--min-time: Value x is not a number"), std::string::npos) << err;
}

}  // namespace
}  // namespace tkv
