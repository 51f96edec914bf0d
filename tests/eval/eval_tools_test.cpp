// kv-dump and bench end to end on a model the test writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/niah.h"
#include "model/gen_model.h"
#include "model/model.h"
#include "tools/kv_dump.h"
#include "eval/kv_file.h"
#include "temp_path.h"
#include "test_models.h"

namespace tkv {
namespace {

// One model per process, removed at exit.
std::string tiny_model() {
  static const TempPath path("tkv_eval_model.gguf");
  static const bool made = generate_model(eval_model_options(), nullptr, path).ok();
  EXPECT_TRUE(made);
  return path;
}

std::string run_cmd(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (p && fgets(buf, sizeof(buf), p)) out += buf;
  *rc = p ? pclose(p) : -1;
  return out;
}

TEST(KvDump, WritesEachLayersKeysAndValues) {
  auto m = Model::load(tiny_model());
  ASSERT_TRUE(m.ok());
  const TempPath dir_path("tkv_dump");
  const std::string& dir = dir_path;
  ASSERT_TRUE(kv_dump(**m, "the cat sat on the mat", {0, 1}, 12, dir, 1).ok());
  auto k = read_kv_file(dir + "/layer1_keys.bin");
  ASSERT_TRUE(k.ok()) << k.error();
  EXPECT_EQ(k->layer, 1u);
  EXPECT_EQ(k->kv_heads, 2u);
  EXPECT_EQ(k->head_dim, 32u);
  EXPECT_GT(k->tokens, 1u);
  EXPECT_LE(k->tokens, 12u);
  double ss = 0;
  for (float v : k->data) {
    ASSERT_TRUE(std::isfinite(v));
    ss += v * v;
  }
  EXPECT_GT(ss, 0.0);
  EXPECT_TRUE(read_kv_file(dir + "/layer0_values.bin").ok());
  auto bad = kv_dump(**m, "x", {7}, 12, dir, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("layer 7"), std::string::npos);
}

TEST(Bench, JsonAndMarkdownOutputsWithMeansOverRuns) {
  const std::string model = tiny_model();
  int rc = 0;
  const std::string base = std::string(TKV_BINARY) + " bench -m " + model + " -p 16 -n 4 -d 0,8 -t 1 -ctk f16,tq4";
  const std::string js = run_cmd(base + " -r 3 -o json 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0);
  auto j = nlohmann::json::parse(js);
  ASSERT_EQ(j.size(), 8u);  // 2 formats x 2 depths x (pp, tg)
  for (const auto& r : j) {
    const auto& s = r["samples_ts"];
    ASSERT_EQ(s.size(), 3u);
    double mean = 0;
    for (double x : s) mean += x / 3;
    double sd = 0;
    for (double x : s) sd += (x - mean) * (x - mean);
    sd = std::sqrt(sd / 2);
    EXPECT_NEAR(r["avg_ts"].get<double>(), mean, 1e-9 * mean);
    EXPECT_NEAR(r["stddev_ts"].get<double>(), sd, 1e-9 * mean + 1e-12);
    EXPECT_GT(r["kv_mib"].get<double>(), 0.0);
  }
  EXPECT_EQ(j[2]["test"], "pp16 @ d8");
  const std::string md = run_cmd(base + " -r 1 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0);
  std::istringstream in(md);
  std::string line;
  int rows = 0;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("| model | size | params | threads | type_k | type_v | test | t/s |", 0), 0u) << line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("| ---", 0), 0u);
  while (std::getline(in, line)) {
    int bars = 0;
    for (char ch : line) bars += ch == '|';
    EXPECT_EQ(bars, 10) << line;
    EXPECT_NE(line.find(" ± "), std::string::npos) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 8);
}

}  // namespace
}  // namespace tkv

namespace tkv {
namespace {

TEST(Niah, ScoringCases) {
  EXPECT_EQ(niah_score(" 4821953.", "4821953"), NiahScore::kFound);
  EXPECT_EQ(niah_score("The number is 4821953 indeed", "4821953"), NiahScore::kFound);
  EXPECT_EQ(niah_score(" I do not know.", "4821953"), NiahScore::kNotFound);
  EXPECT_EQ(niah_score(" 48219530", "4821953"), NiahScore::kExtraDigits);
  EXPECT_EQ(niah_score(" 1234567", "4821953"), NiahScore::kWrongNumber);
  EXPECT_EQ(niah_number(5, 1024, 50, 0), niah_number(5, 1024, 50, 0));
  EXPECT_NE(niah_number(5, 1024, 50, 0), niah_number(6, 1024, 50, 0));
  EXPECT_EQ(niah_number(5, 1024, 50, 0).size(), 7u);
}

TEST(Niah, NeedlePlacedAtTheRequestedDepth) {
  auto m = Model::load(tiny_model());
  ASSERT_TRUE(m.ok());
  const Tokenizer& tok = (*m)->tokenizer();
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the cat sat. ";
  const auto hay = tok.encode(text, false);
  for (int depth : {0, 25, 50, 75, 100}) {
    const auto p = niah_build(tok, hay, "The special magic number is 1234567.", "What is the number?", "", 400, depth);
    ASSERT_GT(p.haystack_tokens, 100u);
    ASSERT_LE(p.tokens.size(), 400u - 16u);
    const double at = double(p.needle_begin - 1) / p.haystack_tokens;  // -1: the BOS
    EXPECT_NEAR(at * 100, depth, 3.0) << depth;
    // The needle tokens are exactly the needle sentence.
    const std::vector<int32_t> needle(p.tokens.begin() + p.needle_begin, p.tokens.begin() + p.needle_end);
    EXPECT_NE(tok.decode(needle).find("1234567"), std::string::npos);
    // It starts right after a sentence end (or at the start).
    if (depth > 0) {
      EXPECT_EQ(tok.piece(p.tokens[p.needle_begin - 1]).back(), '.');
    }
  }
  // The grid runs, reproducibly, and the SVG has one cell per (depth, context).
  NiahOptions o;
  o.contexts = {320, 400};
  o.depths = {0, 100};
  o.cache.type_k = o.cache.type_v = "f16";
  auto a = niah_run(**m, text, o);
  auto b = niah_run(**m, text, o);
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_EQ(a->size(), 4u);
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].number, (*b)[i].number);
    EXPECT_EQ((*a)[i].answer, (*b)[i].answer);
  }
  const std::string svg = niah_svg(*a, "t");
  size_t rects = 0;
  for (size_t pos = svg.find("<rect"); pos != std::string::npos; pos = svg.find("<rect", pos + 1)) ++rects;
  EXPECT_EQ(rects, 4u);
  const std::string esc = niah_svg(*a, "policy a&b<c>.tkvp");  // titles are escaped XML text
  EXPECT_NE(esc.find("policy a&amp;b&lt;c&gt;.tkvp"), std::string::npos);
}

}  // namespace
}  // namespace tkv

namespace tkv {
namespace {

TEST(Report, SelfContainedPageFromJsonLines) {
  const std::string dir = testing::TempDir();
  {
    std::ofstream f(dir + "tkv_r.jsonl");
    f << R"({"tool":"perplexity","type_k":"tq4","type_v":"tq4","bits_per_value":4.25,"ppl":256.2,"mean_center":true,"kld":{"mean":0.0029}})" << "\n";
    f << R"({"tool":"perplexity","type_k":"f16","type_v":"f16","bits_per_value":16,"ppl":255.8,"mean_center":true,"kld":{"mean":0.0}})" << "\n";
    f << R"({"tool":"bench","type_k":"tq4","type_v":"tq4","n_gen":16,"n_depth":0,"avg_ts":100.0,"test":"tg16"})" << "\n";
    f << R"({"tool":"bench","type_k":"tq4","type_v":"tq4","n_gen":16,"n_depth":4096,"avg_ts":80.0,"test":"tg16 @ d4096"})" << "\n";
    f << R"({"tool":"niah","type_k":"tq4","type_v":"tq4","cells":[{"context":1024,"depth":50,"score":"found"}]})" << "\n";
  }
  int rc = 0;
  run_cmd(std::string(TKV_BINARY) + " report --in " + dir + "tkv_r.jsonl --out " + dir + "tkv_r.html 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0);
  std::ifstream in(dir + "tkv_r.html");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string html = ss.str();
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 5u);  // PPL, KLD, generation and prompt speed, one NIAH grid
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);  // nothing loaded from the network
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("tq4/tq4"), std::string::npos);
  // Bad input is a clear error.
  {
    std::ofstream f(dir + "tkv_bad.jsonl");
    f << "not json\n";
  }
  run_cmd(std::string(TKV_BINARY) + " report --in " + dir + "tkv_bad.jsonl --out " + dir + "x.html 2>/dev/null", &rc);
  EXPECT_NE(rc, 0);
}

}  // namespace
}  // namespace tkv
