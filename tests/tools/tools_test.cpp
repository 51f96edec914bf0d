// kv-stats and demo: the figures agree with the math (Lloyd-Max distortion for
// rotated formats, exact mean centring, the RD ratio definition), the CLI writes
// parseable JSON and valid files, and bad input gives a message and exit code 1.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/codebook.h"
#include "codec/format.h"
#include "tools/demo.h"
#include "eval/kv_file.h"
#include "eval/kv_stats.h"
#include "tools/synthetic_kv.h"
#include "test_cli.h"
#include "shared_data.h"

namespace tkv {
namespace {

namespace fs = std::filesystem;

const KvStatsRow& row(const std::vector<KvStatsRow>& rows, const std::string& format, bool centered) {
  for (const auto& r : rows)
    if (r.format == format && r.mean_centered == centered) return r;
  throw std::runtime_error("no row " + format);
}

// Sum ||x - μ||² / sum ||x||² with μ = mean of the first 64 rows of each head.
double centred_energy_fraction(const KvFile& kv) {
  const int d = static_cast<int>(kv.head_dim);
  double total = 0, centred = 0;
  for (uint32_t h = 0; h < kv.kv_heads; ++h) {
    const float* x = kv.head(h);
    std::vector<double> mu(d, 0.0);
    for (int t = 0; t < 64; ++t)
      for (int c = 0; c < d; ++c) mu[c] += x[t * d + c] / 64.0;
    for (size_t t = 0; t < kv.tokens; ++t)
      for (int c = 0; c < d; ++c) {
        total += double(x[t * d + c]) * x[t * d + c];
        centred += std::pow(x[t * d + c] - mu[c], 2);
      }
  }
  return centred / total;
}

// One synthetic measurement shared by the tests below (d = 128, outlier channels,
// ~half the energy in channel means).
class SyntheticStats : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SyntheticKvOptions so;
    so.tokens = 1024;
    kv_ = new KvFile(synthetic_kv(so));
    KvStatsOptions opt;
    opt.formats = {"f32", "f16", "q4_0", "q4_0r", "tq2", "tq3", "tq4", "tq4.5"};
    auto r = kv_stats(*kv_, "synthetic", opt);
    ASSERT_TRUE(r.ok()) << r.error();
    rows_ = new std::vector<KvStatsRow>(std::move(*r));
  }
  static void TearDownTestSuite() {
    delete rows_;
    delete kv_;
  }
  static KvFile* kv_;
  static std::vector<KvStatsRow>* rows_;
};
KvFile* SyntheticStats::kv_ = nullptr;
std::vector<KvStatsRow>* SyntheticStats::rows_ = nullptr;

TEST_F(SyntheticStats, LosslessAndHalfPrecisionFormats) {
  const auto& f32 = row(*rows_, "f32", false);
  EXPECT_EQ(f32.rel_mse, 0.0);
  EXPECT_EQ(f32.cosine, 1.0);
  EXPECT_EQ(f32.ip_rel_err, 0.0);
  EXPECT_EQ(f32.attn_rel_err, 0.0);
  EXPECT_LT(row(*rows_, "f32", true).rel_mse, 1e-12);  // x - μ + μ rounds in float
  EXPECT_LT(row(*rows_, "f16", false).rel_mse, 1e-6);
  EXPECT_LT(row(*rows_, "f16", true).rel_mse, 1e-6);
}

TEST_F(SyntheticStats, RotatedFormatsHitTheLloydMaxDistortionWhateverTheChannelScales) {
  // After the rotation every vector's direction is coded with the same expected
  // error E||u - û||² (DESIGN.md 1.2), so rel MSE = that value, outliers or not.
  for (int b : {2, 3, 4}) {
    const double opt = lloyd_max(128, b).mse_vector();
    for (bool centred : {false, true}) {
      const auto& r = row(*rows_, "tq" + std::to_string(b), centred);
      // Centring codes x - μ: the error is opt times the energy left after centring.
      const double want = opt * (centred ? centred_energy_fraction(*kv_) : 1.0);
      EXPECT_NEAR(r.rel_mse / want, 1.0, 0.10) << r.format << " centred " << centred;
    }
  }
  EXPECT_NEAR(row(*rows_, "tq4", false).rel_mse, 0.00931, 0.000931);
}

TEST_F(SyntheticStats, MeanCentringHelpsWhenChannelsHaveBigMeans) {
  const double frac = centred_energy_fraction(*kv_);
  EXPECT_LT(frac, 0.7);  // the synthetic data has big channel means
  for (const char* f : {"q4_0", "q4_0r", "tq3", "tq4"})
    EXPECT_LT(row(*rows_, f, true).rel_mse, 0.8 * row(*rows_, f, false).rel_mse) << f;
}

TEST_F(SyntheticStats, DerivedColumnsFollowTheirDefinitions) {
  for (const auto& r : *rows_) {
    auto c = make_codec(r.format, 128);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(r.bits_per_value, (*c)->bits_per_value()) << r.format;
    EXPECT_DOUBLE_EQ(r.size_vs_f16, 16.0 / r.bits_per_value) << r.format;
    EXPECT_NEAR(r.rd_ratio, r.rel_mse * std::pow(4.0, r.bits_per_value), 1e-12 * r.rd_ratio) << r.format;
    EXPECT_GT(r.cosine, 0.9) << r.format;
    EXPECT_LE(r.cosine, 1.0 + 1e-12) << r.format;
    EXPECT_EQ(r.d, 128);
    EXPECT_EQ(r.source, "synthetic");
  }
  EXPECT_EQ(row(*rows_, "tq4", false).bits_per_value, 4.125);  // 4 + 16/128
  // More bits, less error, on every metric.
  for (bool c : {false, true}) {
    const auto &t2 = row(*rows_, "tq2", c), &t3 = row(*rows_, "tq3", c), &t4 = row(*rows_, "tq4", c);
    EXPECT_GT(t2.rel_mse, t3.rel_mse);
    EXPECT_GT(t3.rel_mse, t4.rel_mse);
    EXPECT_GT(t2.ip_rel_err, t3.ip_rel_err);
    EXPECT_GT(t3.ip_rel_err, t4.ip_rel_err);
    EXPECT_GT(t2.attn_rel_err, t3.attn_rel_err);
    EXPECT_GT(t3.attn_rel_err, t4.attn_rel_err);
  }
}

TEST_F(SyntheticStats, TableNamesEveryFormatAndBothVariants) {
  const std::string t = kv_stats_table(*rows_);
  for (const char* s : {"plain", "mean-centred", "rel MSE", "RD ratio", "attn err", "q4_0r", "tq4.5"})
    EXPECT_NE(t.find(s), std::string::npos) << s;
}

TEST(KvStats, ZeroMeanDataGainsNothingFromCentring) {
  SyntheticKvOptions so;
  so.tokens = 512;
  so.max_mean_share = 0;
  const KvFile kv = synthetic_kv(so);
  KvStatsOptions opt;
  opt.formats = {"tq4"};
  auto r = kv_stats(kv, "synthetic", opt);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_NEAR(row(*r, "tq4", true).rel_mse / row(*r, "tq4", false).rel_mse, 1.0, 0.1);
}

TEST(KvStats, DeterministicForASeedAndQueriesFollowTheSeed) {
  SyntheticKvOptions so;
  so.tokens = 200;
  const KvFile kv = synthetic_kv(so);
  EXPECT_EQ(kv.data, synthetic_kv(so).data);
  KvStatsOptions opt;
  opt.formats = {"tq3"};
  auto a = kv_stats(kv, "s", opt), b = kv_stats(kv, "s", opt);
  opt.seed = 12345;
  auto c = kv_stats(kv, "s", opt);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(kv_stats_json(*a), kv_stats_json(*b));
  EXPECT_NE((*a)[0].ip_rel_err, (*c)[0].ip_rel_err);
}

TEST(KvStats, ErrorsNameSourceHeadRowAndFormat) {
  SyntheticKvOptions so;
  so.tokens = 100;
  KvFile kv = synthetic_kv(so);
  kv.head(1)[5 * 128 + 3] = NAN;
  KvStatsOptions opt;
  opt.formats = {"tq4"};
  auto r = kv_stats(kv, "my.bin", opt);
  ASSERT_FALSE(r.ok());
  for (const char* s : {"my.bin", "head 1", "row 5", "element 3", "nan"})
    EXPECT_NE(r.error().find(s), std::string::npos) << s << " in: " << r.error();
  opt.plain = false;  // the centring mean sees the NaN first: still named by row
  r = kv_stats(kv, "my.bin", opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("row 5"), std::string::npos) << r.error();

  opt.formats = {"tq4x"};
  r = kv_stats(synthetic_kv(so), "s", opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("tq4x"), std::string::npos) << r.error();

  so.d = 4;
  opt.formats = {"tq4"};
  r = kv_stats(synthetic_kv(so), "s", opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("head dim 4"), std::string::npos) << r.error();
}

TEST(KvStats, RoundtripEqualsCodecDecode) {
  SyntheticKvOptions so;
  so.d = 96;  // not a power of two: dense rotation
  so.tokens = 70;
  const KvFile kv = synthetic_kv(so);
  for (const char* f : {"tq3", "q4_0r", "f16"}) {
    auto out = kv_roundtrip(kv, f, false);
    ASSERT_TRUE(out.ok()) << out.error();
    auto c = make_codec(f, 96);
    ASSERT_TRUE(c.ok());
    std::vector<uint8_t> q(kv.tokens * (*c)->row_bytes());
    for (uint32_t h = 0; h < kv.kv_heads; ++h) {
      ASSERT_TRUE((*c)->quantize(kv.head(h), kv.tokens, q.data()).ok());
      std::vector<float> dec(kv.tokens * 96);
      (*c)->dequantize(q.data(), kv.tokens, dec.data());
      EXPECT_EQ(0, std::memcmp(dec.data(), out->head(h), dec.size() * 4)) << f << " head " << h;
    }
  }
}

TEST(Demo, OneVerdictPerFormatWithItsFigures) {
  SyntheticKvOptions so;
  so.tokens = 300;
  KvStatsOptions opt;
  opt.formats = demo_formats();
  auto rows = kv_stats(synthetic_kv(so), "synthetic", opt);
  ASSERT_TRUE(rows.ok()) << rows.error();
  const auto v = demo_verdicts(*rows);
  ASSERT_EQ(v.size(), demo_formats().size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i].rfind(demo_formats()[i] + ":", 0), 0u) << v[i];
  const std::string tq4 = v[std::find(demo_formats().begin(), demo_formats().end(), "tq4") - demo_formats().begin()];
  EXPECT_NE(tq4.find("4.125 bits/value"), std::string::npos) << tq4;
  EXPECT_NE(tq4.find("3.9x smaller than f16"), std::string::npos) << tq4;
}

// ---- the turbokv binary -----------------------------------------------------

TEST_F(Cli, HelpVersionAndUnknownFlag) {
  CliResult r = run("--help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("kv-stats"), std::string::npos);
  EXPECT_NE(r.out.find("demo"), std::string::npos);
  r = run("--version");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("turbokv"), std::string::npos);
  r = run("kv-stats --synthetic --bogus");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
  r = run("");
  EXPECT_NE(r.rc, 0);
}

TEST_F(Cli, JsonHasEveryKeyForEveryFormatAndVariant) {
  CliResult r = run("kv-stats --synthetic --n 256 --d 64 --formats f32,q4_0r,tq4 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 6u);
  std::map<std::string, int> seen;
  for (const auto& o : j) {
    for (const char* k : {"format", "bits_per_value", "size_vs_f16", "rel_mse", "cosine", "ip_rel_err",
                          "attn_rel_err", "rd_ratio", "mean_centered", "source", "d"})
      EXPECT_TRUE(o.contains(k)) << k;
    EXPECT_EQ(o["source"], "synthetic");
    EXPECT_EQ(o["d"], 64);
    EXPECT_TRUE(o["mean_centered"].is_boolean());
    EXPECT_TRUE(o["rel_mse"].is_number());
    seen[o["format"].get<std::string>()] += o["mean_centered"].get<bool>() ? 10 : 1;
  }
  EXPECT_EQ(seen, (std::map<std::string, int>{{"f32", 11}, {"q4_0r", 11}, {"tq4", 11}}));
}

// bench-attn -r N: every pair measured in turn N times per setting, each
// ratio against f16 in the same round (a drifting host moves both), the
// medians reported. The test recomputes the ratios from the per-round times
// the JSON gives (it times nothing itself).
TEST_F(Cli, BenchAttnTakesEachRatioAgainstF16InTheSameRound) {
  CliResult r = run("bench-attn --d 64 --kv-heads 2 --q-heads 4 --ctx 256,512 --prefill-max 256 --formats tq4,f16,tq2 "
                    "--min-time 0 -t 1 -r 4 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 9u);  // (256 decode, 256 prefill, 512 decode) x 3 pairs
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return 0.5 * (v[1] + v[2]);  // of 4
  };
  std::map<std::string, std::vector<double>> f16_ms;  // "ctx/mode" -> f16's per-round ms
  for (const auto& o : j)
    if (o["type_k"] == "f16") f16_ms[std::to_string(o["ctx"].get<int>()) + o["mode"].get<std::string>()] =
          o["ms_each"].get<std::vector<double>>();
  ASSERT_EQ(f16_ms.size(), 3u);
  for (const auto& o : j) {
    const std::string what = o["type_k"].get<std::string>() + " " + std::to_string(o["ctx"].get<int>()) + " " +
                             o["mode"].get<std::string>();
    EXPECT_EQ(o["repetitions"], 4) << what;
    const auto ms = o["ms_each"].get<std::vector<double>>();
    ASSERT_EQ(ms.size(), 4u) << what;
    EXPECT_NEAR(o["ms"].get<double>(), median(ms), 1e-9 * median(ms)) << what;
    const int n_q = o["mode"] == "prefill" ? o["ctx"].get<int>() : 1;
    EXPECT_NEAR(o["tokens_per_s"].get<double>(), n_q / (median(ms) * 1e-3), 1e-6 * o["tokens_per_s"].get<double>());
    const auto& f = f16_ms[std::to_string(o["ctx"].get<int>()) + o["mode"].get<std::string>()];
    std::vector<double> ratios;
    for (int k = 0; k < 4; ++k) ratios.push_back(f[k] / ms[k]);
    const double want = median(ratios);
    ASSERT_TRUE(o.contains("speedup_vs_f16")) << what;
    EXPECT_NEAR(o["speedup_vs_f16"].get<double>(), want, 1e-9 * want) << what;
    EXPECT_DOUBLE_EQ(o["speedup_vs_f16_min"].get<double>(), *std::min_element(ratios.begin(), ratios.end())) << what;
    EXPECT_DOUBLE_EQ(o["speedup_vs_f16_max"].get<double>(), *std::max_element(ratios.begin(), ratios.end())) << what;
    if (o["type_k"] == "f16") {
      EXPECT_EQ(o["speedup_vs_f16"].get<double>(), 1.0);
    }
  }
  // The text table: one row per pair and setting, the range column with -r > 1.
  r = run("bench-attn --d 64 --kv-heads 2 --q-heads 4 --ctx 256 --prefill-max 0 --formats f16,tq4 --min-time 0 -t 1 -r 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("vs f16 range"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.00-1.00x"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << "no progress on a pipe";
  // Bad counts are refused, naming the flag.
  for (const char* bad : {"-r 0", "-r -3", "-r x", "--min-time -1"}) {
    r = run(std::string("bench-attn --ctx 256 --formats tq4 ") + bad);
    EXPECT_NE(r.rc, 0) << bad;
    EXPECT_NE(r.err.find(std::string(bad).substr(0, 2) == "-r" ? "--repetitions" : "--min-time"), std::string::npos)
        << bad << ": " << r.err;
  }
}

TEST_F(Cli, SeveralKvFilesAreEachReported) {
  SyntheticKvOptions so;
  so.d = 32;
  so.tokens = 40;
  ASSERT_TRUE(write_kv_file(path("a.bin"), synthetic_kv(so)).ok());
  so.seed = 2;
  ASSERT_TRUE(write_kv_file(path("b.bin"), synthetic_kv(so)).ok());
  CliResult r = run("kv-stats --kv '" + path("a.bin") + "' --kv '" + path("b.bin") + "' --formats tq4 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[0]["source"], path("a.bin"));
  EXPECT_EQ(j[2]["source"], path("b.bin"));
  r = run("kv-stats --kv '" + path("a.bin") + "' --formats tq4");  // the human table
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("mean-centred"), std::string::npos);
  EXPECT_NE(r.out.find("tq4"), std::string::npos);
}

TEST_F(Cli, RoundtripWritesTheDecodedVectors) {
  SyntheticKvOptions so;
  so.d = 64;
  so.tokens = 80;
  const KvFile kv = synthetic_kv(so);
  ASSERT_TRUE(write_kv_file(path("in.bin"), kv).ok());
  for (bool centre : {false, true}) {
    CliResult r = run("kv-stats --kv '" + path("in.bin") + "' --roundtrip tq3 -o '" + path("out.bin") + "'" +
                (centre ? " --mean-center" : ""));
    ASSERT_EQ(r.rc, 0) << r.err;
    auto out = read_kv_file(path("out.bin"));
    ASSERT_TRUE(out.ok()) << out.error();
    auto want = kv_roundtrip(kv, "tq3", centre);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(out->kv_heads, kv.kv_heads);
    EXPECT_EQ(out->tokens, kv.tokens);
    EXPECT_EQ(out->head_dim, kv.head_dim);
    EXPECT_EQ(0, std::memcmp(out->data.data(), want->data.data(), kv.data.size() * 4)) << "centre " << centre;
  }
  // Without centring this is exactly the codec's dequantize.
  auto c = make_codec("tq3", 64);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(0, run("kv-stats --kv '" + path("in.bin") + "' --roundtrip tq3 -o '" + path("out.bin") + "'").rc);
  auto out = read_kv_file(path("out.bin"));
  ASSERT_TRUE(out.ok());
  std::vector<uint8_t> q(kv.tokens * (*c)->row_bytes());
  std::vector<float> dec(kv.tokens * 64);
  ASSERT_TRUE((*c)->quantize(kv.head(1), kv.tokens, q.data()).ok());
  (*c)->dequantize(q.data(), kv.tokens, dec.data());
  EXPECT_EQ(0, std::memcmp(dec.data(), out->head(1), dec.size() * 4));
}

TEST_F(Cli, BadInputGivesAMessageAndExitCode1) {
  CliResult r = run("kv-stats --kv '" + path("missing.bin") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(path("missing.bin")), std::string::npos) << r.err;

  r = run("kv-stats --synthetic --n 64 --formats tq4,tq99");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("tq99"), std::string::npos) << r.err;

  SyntheticKvOptions so;
  so.d = 32;
  so.tokens = 20;
  KvFile kv = synthetic_kv(so);
  kv.data[7 * 32 + 2] = NAN;
  ASSERT_TRUE(write_kv_file(path("nan.bin"), kv).ok());
  r = run("kv-stats --kv '" + path("nan.bin") + "' --formats tq4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("row 7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nan"), std::string::npos) << r.err;
  r = run("kv-stats --kv '" + path("nan.bin") + "' --roundtrip tq4 --mean-center -o '" + path("o.bin") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("row 7"), std::string::npos) << r.err;

  so.d = 4;  // below every format's minimum head dim
  ASSERT_TRUE(write_kv_file(path("d4.bin"), synthetic_kv(so)).ok());
  r = run("kv-stats --kv '" + path("d4.bin") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("head dim 4"), std::string::npos) << r.err;

  std::ofstream(path("junk.bin")) << "not a kv file at all";
  r = run("kv-stats --kv '" + path("junk.bin") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("magic"), std::string::npos) << r.err;

  r = run("kv-stats --kv '" + path("d4.bin") + "' --roundtrip tq4");  // no -o
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("-o"), std::string::npos) << r.err;
  r = run("kv-stats");
  EXPECT_EQ(r.rc, 1);
}

TEST_F(Cli, DemoRunsAndGivesVerdicts) {
  CliResult r = run("demo");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Synthetic keys"), std::string::npos);
  EXPECT_NE(r.out.find("Verdict"), std::string::npos);
  EXPECT_NE(r.out.find("  tq4: "), std::string::npos);
  // With shared/ (model, essays, WikiText): generation on every cache, the
  // calibrated policy, and a measured KLD per line.
  TKV_NEED_SHARED("models/ref-5m/ref-5m-f32.gguf", "data/text/wikitext-2-raw-test.txt", "data/niah/paul-graham-essays");
  EXPECT_NE(r.out.find("  tqc4  KV"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KLD 0.00000"), std::string::npos) << r.out;  // f16 against f32
}

TEST_F(Cli, CalibratePolicyAndPresetFlags) {
  // A small random model and text; calibrate, then use the policy.
  CliResult r = run("gen-model --layers 2 --dim 64 --heads 4 --kv-heads 2 --head-dim 32 --ffn 96 -o '" + path("m.gguf") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string text;
  for (int i = 0; i < 80; ++i) text += "the cat sat on the mat, then " + std::to_string(i * 7) + " dogs ran.\n";
  std::ofstream(path("t.txt")) << text;
  r = run("calibrate -m '" + path("m.gguf") + "' -f '" + path("t.txt") + "' -c 64 --tokens 256 --budget 3.5 --kld-tokens 64 -o '" +
          path("p.tkvp") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("bits per value on average"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("calibrate:"), std::string::npos) << r.err;  // progress only on a terminal
  r = run("perplexity -m '" + path("m.gguf") + "' -f '" + path("t.txt") + "' -c 64 --chunks 2 --kv-policy '" + path("p.tkvp") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Final estimate: PPL"), std::string::npos);
  EXPECT_NE(r.err.find("policy"), std::string::npos) << r.err;
  // 80 tokens: past the 64 staged rows, so the preset's coded rows are read.
  r = run("run -m '" + path("m.gguf") + "' -p hello -n 80 --kv-preset compact");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("preset compact"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generation: 80 tokens"), std::string::npos) << r.err;
  // niah names what the cache stores and its bits per value from the policy, not from -ctk/-ctv.
  fs::create_directories(path("hay"));
  std::ofstream(path("hay/a.txt")) << text;
  r = run("niah -m '" + path("m.gguf") + "' --haystack '" + path("hay") + "' --contexts 160 --depths 50 --kv-policy '" +
          path("p.tkvp") + "' --svg '" + path("n.svg") + "' --json-out '" + path("n.json") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("cache K policy"), std::string::npos) << r.out;
  const auto nj = nlohmann::json::parse(slurp(path("n.json")));
  EXPECT_EQ(nj.at("type_k").get<std::string>(), "policy " + path("p.tkvp"));
  const double policy_bits = nj.at("bits_per_value").get<double>();
  EXPECT_GT(policy_bits, 3.0);
  EXPECT_LT(policy_bits, 4.0);  // --budget 3.5 (tq4 would give 4.5 at d = 32)
  // Errors: another model, a corrupted file, both flags, an unknown preset.
  r = run("gen-model --layers 2 --dim 64 --heads 4 --kv-heads 2 --head-dim 32 --ffn 96 --seed 9 -o '" + path("o.gguf") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("run -m '" + path("o.gguf") + "' -p hello -n 2 --kv-policy '" + path("p.tkvp") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("another model"), std::string::npos) << r.err;
  std::string bytes = slurp(path("p.tkvp"));
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(path("bad.tkvp"), std::ios::binary) << bytes;
  r = run("run -m '" + path("m.gguf") + "' -p hello -n 2 --kv-policy '" + path("bad.tkvp") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("checksum"), std::string::npos) << r.err;
  r = run("run -m '" + path("m.gguf") + "' -p hello -n 2 --kv-policy '" + path("p.tkvp") + "' --kv-preset quality");
  EXPECT_NE(r.rc, 0);
  r = run("run -m '" + path("m.gguf") + "' -p hello -n 2 --kv-preset huge");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("huge"), std::string::npos) << r.err;
  r = run("run -m '" + path("m.gguf") + "' -p hello -n 2 -ctk tqc4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--kv-policy"), std::string::npos) << r.err;
}

TEST_F(Cli, KvStatsCalibratedReportsTqcOnTheSecondHalf) {
  SyntheticKvOptions so;
  so.d = 32;
  so.tokens = 200;
  ASSERT_TRUE(write_kv_file(path("a.bin"), synthetic_kv(so)).ok());
  CliResult r = run("kv-stats --kv '" + path("a.bin") + "' --calibrated --formats tq3,tqc3 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  double tq = 0, tqc = 0;
  for (const auto& o : j) {
    EXPECT_EQ(o["tokens"], 100);  // measured on the second half
    if (o["format"] == "tqc3") tqc = o["rel_mse"];
    if (o["format"] == "tq3" && !o["mean_centered"].get<bool>()) tq = o["rel_mse"];
  }
  ASSERT_GT(tqc, 0);
  EXPECT_LT(tqc, tq);  // synthetic keys have big channel means and spread variances
  r = run("kv-stats --kv '" + path("a.bin") + "' --formats tqc3");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--calibrated"), std::string::npos) << r.err;
}

// ---- real Qwen3.5-0.8B keys (shared/) ----------------------------------------

TEST(KvStatsReal, TurboBeatsLlamaQ4InRateDistortionOnQwenKeysAndValues) {
  // All four files RESULTS §1 credits: keys and values of layers 3 and 7.
  TKV_NEED_SHARED("data/kv/qwen3.5-0.8b/layer3_keys.bin", "data/kv/qwen3.5-0.8b/layer7_keys.bin",
                  "data/kv/qwen3.5-0.8b/layer3_values.bin", "data/kv/qwen3.5-0.8b/layer7_values.bin");
  for (const char* name : {"layer3_keys.bin", "layer7_keys.bin", "layer3_values.bin", "layer7_values.bin"}) {
    const std::string p = std::string(TKV_SHARED_DIR) + "/data/kv/qwen3.5-0.8b/" + name;
    auto kv = read_kv_file(p);
    ASSERT_TRUE(kv.ok()) << kv.error();
    KvStatsOptions opt;
    opt.formats = {"q4_0", "q4_0r", "tq3", "tq4"};
    auto rows = kv_stats(*kv, p, opt);
    ASSERT_TRUE(rows.ok()) << rows.error();
    for (bool c : {false, true}) {
      for (const char* tq : {"tq3", "tq4"})
        for (const char* q : {"q4_0", "q4_0r"}) {
          const double a = row(*rows, tq, c).rd_ratio, b = row(*rows, q, c).rd_ratio;
          EXPECT_LT(a, b) << name << (c ? " centred " : " plain ") << tq << " " << a << " vs " << q << " " << b;
        }
      // Measured (seed default): layer3 plain tq3 2.32, tq4 2.56, q4_0r 3.69, q4_0 5.91.
      RecordProperty(std::string(name) + (c ? "_centred" : "_plain") + "_tq4_rd",
                     std::to_string(row(*rows, "tq4", c).rd_ratio));
    }
  }
}

// `run --prompt-cache` with protected tokens: refused up front with exit 1
// and no file (it used to warn "not saved" and exit 0); perplexity reads the
// text's bytes as they are (CR LF kept, as llama-perplexity), and
// --normalize-newlines reads CR LF as LF; a llama.cpp base file needs no -f.
TEST_F(Cli, PromptCacheWithProtectionAndPerplexityReading) {
  CliResult r = run("gen-model --layers 2 --dim 64 --heads 4 --kv-heads 2 --head-dim 32 --ffn 96 -o '" + path("m.gguf") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("run -m '" + path("m.gguf") + "' -p hello -n 4 --kv-preset tiny --prompt-cache '" + path("c.tkvc") + "'");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("protected tokens"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("c.tkvc")));
  r = run("run -m '" + path("m.gguf") + "' -p hello -n 4 --kv-protect 0,16,q8_0 --prompt-cache '" + path("c.tkvc") + "'");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_FALSE(fs::exists(path("c.tkvc")));
  std::string lf, crlf;
  for (int i = 0; i < 60; ++i) {
    const std::string line = "line " + std::to_string(i) + " of the text, with words";
    lf += line + "\n";
    crlf += line + "\r\n";
  }
  std::ofstream(path("lf.txt"), std::ios::binary) << lf;
  std::ofstream(path("crlf.txt"), std::ios::binary) << crlf;
  auto ppl = [&](const std::string& file, const std::string& extra) {
    CliResult p = run("perplexity -m '" + path("m.gguf") + "' -f '" + path(file) + "' -c 64 --chunks 2 " + extra);
    EXPECT_EQ(p.rc, 0) << p.err;
    return p.out.substr(0, p.out.find('\n'));
  };
  const std::string a = ppl("lf.txt", ""), b = ppl("crlf.txt", ""), c = ppl("crlf.txt", "--normalize-newlines");
  EXPECT_NE(a, b);  // other bytes, other tokens
  EXPECT_EQ(a, c);
  r = run("perplexity -m '" + path("m.gguf") + "' -c 64");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("-f,--file is required"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tkv
