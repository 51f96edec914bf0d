// KV policies: calibration on a model the test writes (deterministic, budget
// met, widths chosen by KLD), the policy file (round trip, bound to its
// model, truncation and corruption are clear errors), caches built from a
// policy or a preset (exact byte accounting, a forward pass runs).
#include <gtest/gtest.h>
#include <unistd.h>
#include <limits>
#include <algorithm>
#include <sstream>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "cache/kv_policy.h"
#include "eval/calibrate.h"
#include "model/gen_model.h"
#include "util/hash.h"

namespace tkv {
namespace {

struct Fixture {
  std::string path, other_path, text;
  std::unique_ptr<Model> model, other;
  Fixture() {
    GenModelOptions o;
    o.layers = 3;
    o.dim = 128;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 32;
    o.ffn = 96;
    o.weight_scale = 3.0f;
    path = testing::TempDir() + std::to_string(getpid()) + "_tkv_policy_model.gguf";
    EXPECT_TRUE(generate_model(o, nullptr, path).ok());
    model = std::move(*Model::load(path));
    o.seed = 2;
    other_path = testing::TempDir() + std::to_string(getpid()) + "_tkv_policy_other.gguf";
    EXPECT_TRUE(generate_model(o, nullptr, other_path).ok());
    other = std::move(*Model::load(other_path));
    for (int i = 0; i < 60; ++i) text += "the cat sat on the mat, then " + std::to_string(i * 7) + " dogs ran.\n";
  }
  ~Fixture() {
    std::remove(path.c_str());
    std::remove(other_path.c_str());
  }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The least total sensitivity over every assignment of candidate widths to
// the entries (W^E of them) whose widths, in units of 1/per_bit bits, fit
// the budget: what calibrate's dynamic programme must find.
double brute_force_kld(const CalibrateReport& rep, double budget, int per_bit) {
  const size_t W = rep.widths.size(), E = rep.entries.size();
  const long units_budget = static_cast<long>(std::floor(budget * per_bit * E + 1e-9));
  double brute = std::numeric_limits<double>::infinity();
  std::vector<size_t> choice(E, 0);
  for (;;) {
    long units = 0;
    double kld = 0;
    for (size_t e = 0; e < E; ++e) {
      units += std::lround(rep.widths[choice[e]] * per_bit);
      kld += rep.entries[e].kld[choice[e]];
    }
    if (units <= units_budget) brute = std::min(brute, kld);
    size_t e = 0;
    while (e < E && ++choice[e] == W) choice[e++] = 0;
    if (e == E) return brute;
  }
}

TEST(Policy, CalibrationIsDeterministicAndMeetsTheBudget) {
  Fixture fx;
  CalibrateOptions o;
  o.n_ctx = 64;
  o.tokens = 512;
  o.kld_tokens = 64;
  o.budget = 3.5;
  CalibrateReport rep;
  auto a = calibrate(*fx.model, fx.text, o, &rep);
  ASSERT_TRUE(a.ok()) << a.error();
  auto b = calibrate(*fx.model, fx.text, o);
  ASSERT_TRUE(b.ok());
  const std::string pa = testing::TempDir() + std::to_string(getpid()) + "_tkv_a.tkvp", pb = testing::TempDir() + std::to_string(getpid()) + "_tkv_b.tkvp";
  ASSERT_TRUE(write_kv_policy(pa, *a).ok());
  ASSERT_TRUE(write_kv_policy(pb, *b).ok());
  EXPECT_EQ(slurp(pa), slurp(pb)) << "same text and seed must give the same policy";
  auto bpv = a->bits_per_value();
  ASSERT_TRUE(bpv.ok());
  EXPECT_LE(*bpv, 3.5 + 1e-9);
  EXPECT_GT(*bpv, 3.0);  // the budget is used, not wasted
  // Sensitivities were measured for every entry and width, and grow as bits shrink.
  ASSERT_EQ(rep.entries.size(), 6u);
  for (const auto& e : rep.entries) {
    ASSERT_EQ(e.kld.size(), rep.widths.size());
    EXPECT_GT(e.kld.front(), e.kld.back()) << "layer " << e.layer;
    for (double k : e.kld) EXPECT_GE(k, -1e-9);
  }
  // The dynamic programme's choice against brute force over every assignment
  // of widths to the 6 entries (W^6 of them): the least total sensitivity
  // whose half-bit units fit the budget is what calibrate chose.
  const size_t W = rep.widths.size(), E = rep.entries.size();
  ASSERT_LE(W, 12u);
  const double brute = brute_force_kld(rep, o.budget, 2);
  EXPECT_NEAR(rep.total_kld, brute, 1e-12 * (1 + brute));
  double chosen = 0, bits = 0;
  for (const auto& e : rep.entries) {
    const size_t wi = std::find(rep.widths.begin(), rep.widths.end(), e.bits) - rep.widths.begin();
    ASSERT_LT(wi, W);
    chosen += e.kld[wi];
    bits += e.bits;
  }
  EXPECT_NEAR(chosen, brute, 1e-12 * (1 + brute));
  EXPECT_LE(bits / E, o.budget + 1e-9);
  std::remove(pa.c_str());
  std::remove(pb.c_str());
}

// --lattice: te8 is a candidate beside the tqc widths; the programme's choice
// is still the brute-force optimum (in sixteenths of a bit: te8 is 2 + 16/d),
// the entries name their formats, and the policy makes a cache that runs.
TEST(Policy, CalibrationWithTheLatticeCandidateIsOptimalAndRuns) {
  Fixture fx;
  CalibrateOptions o;
  o.n_ctx = 64;
  o.tokens = 512;
  o.kld_tokens = 64;
  o.budget = 2.5;
  o.lattice = true;
  CalibrateReport rep;
  auto pol = calibrate(*fx.model, fx.text, o, &rep);
  ASSERT_TRUE(pol.ok()) << pol.error();
  const int d = pol->head_dim;
  ASSERT_EQ(rep.formats.size(), rep.widths.size());
  ASSERT_EQ(rep.formats.back(), "te8");
  EXPECT_DOUBLE_EQ(rep.widths.back(), 2.0 + 16.0 / d);
  const size_t E = rep.entries.size();
  const double brute = brute_force_kld(rep, o.budget, 16);
  EXPECT_NEAR(rep.total_kld, brute, 1e-12 * (1 + brute));
  int lattice = 0;
  for (int l = 0; l < pol->n_layer; ++l)
    for (const KvPolicyEntry* e : {&pol->k[l], &pol->v[l]}) {
      lattice += e->format == "te8";
      EXPECT_TRUE(e->format == "te8" || is_calibrated_format(e->format)) << e->format;
    }
  for (const auto& e : rep.entries) EXPECT_FALSE(e.format.empty());
  auto bpv = pol->bits_per_value();
  ASSERT_TRUE(bpv.ok());
  EXPECT_LE(*bpv, o.budget + 1e-9);
  KvCacheOptions co;
  co.capacity = 80;
  co.policy = std::make_shared<const KvPolicy>(*pol);
  auto cache = KvCache::create(fx.model->config().kv_shape(), co);
  ASSERT_TRUE(cache.ok()) << cache.error();
  std::vector<int32_t> toks = fx.model->tokenizer().encode(fx.text.substr(0, 400), true);
  toks.resize(std::min<size_t>(toks.size(), 70));
  std::vector<float> logits(size_t(fx.model->config().n_vocab));
  ASSERT_TRUE(fx.model->forward(toks.data(), static_cast<int>(toks.size()), 0, **cache, 1, logits.data()).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  std::printf("lattice entries chosen at a 2.5-bit budget: %d of %zu\n", lattice, E);
}

// Protected tokens in the budget: their rows (a ring of 32 q8_0 rows over
// budget_ctx tokens) come off the widths' share, the widths are still the
// optimum of the rest; the policy records the protection, the file keeps it,
// a cache built from the policy has it, and a version-1 file (before
// protection) still reads. Auto measures each protection's policy and keeps
// the least KLD; one whose rows leave no room is skipped.
TEST(Policy, CalibrationCountsProtectedTokensAndRecordsThem) {
  Fixture fx;
  CalibrateOptions o;
  o.n_ctx = 64;
  o.tokens = 512;
  o.kld_tokens = 64;
  o.budget = 3.0;
  o.protect_recent = 32;
  o.budget_ctx = 256;
  CalibrateReport rep;
  auto pol = calibrate(*fx.model, fx.text, o, &rep);
  ASSERT_TRUE(pol.ok()) << pol.error();
  ASSERT_EQ(rep.protect_trials.size(), 1u);
  const double ring = 32 * 8.5 / 256;  // q8_0 at d = 32: 34 bytes per row of 32 values
  EXPECT_NEAR(rep.protect_trials[0].bits, ring, 1e-9);
  auto bpv = pol->bits_per_value();
  ASSERT_TRUE(bpv.ok());
  EXPECT_LE(*bpv, o.budget - ring + 1e-9);
  const double brute = brute_force_kld(rep, o.budget - ring, 16);
  EXPECT_NEAR(rep.total_kld, brute, 1e-12 * (1 + brute));
  EXPECT_EQ(pol->protect_sinks, 0);
  EXPECT_EQ(pol->protect_recent, 32);
  EXPECT_EQ(pol->protect_type, "q8_0");
  const std::string p = testing::TempDir() + std::to_string(getpid()) + "_tkv_prot.tkvp";
  ASSERT_TRUE(write_kv_policy(p, *pol).ok());
  KvCacheOptions co;
  ASSERT_TRUE(apply_kv_policy_or_preset(p, "", pol->n_layer, fx.model->fingerprint(), co).ok());
  EXPECT_EQ(co.protect_recent, 32);
  EXPECT_EQ(co.protect_type, "q8_0");
  co.capacity = 256;
  auto cache = KvCache::create(fx.model->config().kv_shape(), co);
  ASSERT_TRUE(cache.ok()) << cache.error();
  EXPECT_NEAR(((*cache)->k_bits_per_value() + (*cache)->v_bits_per_value()) / 2, *bpv + ring, 1e-9);
  // The same policy as version 1: no protection fields, read without them.
  std::string v1 = slurp(p);
  uint32_t version = 1, len;
  std::memcpy(v1.data() + 8, &version, 4);
  std::memcpy(&len, v1.data() + 40, 4);
  const size_t at = 44 + len;  // after the description: sinks, recent, the format's length and name
  uint32_t type_len;
  std::memcpy(&type_len, v1.data() + at + 8, 4);
  v1.erase(at, 12 + type_len);
  const uint64_t sum = fnv1a(v1.data(), v1.size() - 8);
  std::memcpy(v1.data() + v1.size() - 8, &sum, 8);
  auto old = parse_kv_policy(v1, fx.model->fingerprint());
  ASSERT_TRUE(old.ok()) << old.error();
  EXPECT_EQ(old->protect_recent, 0);
  EXPECT_EQ(old->k[0].format, pol->k[0].format);
  // A protected format the head dim cannot hold: refused by name.
  KvPolicy bad = *pol;
  bad.protect_type = "q8_0x";
  ASSERT_TRUE(write_kv_policy(p, bad).ok());
  auto r = read_kv_policy(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("protected tokens' format"), std::string::npos) << r.error();
  std::remove(p.c_str());

  o.protect_recent = 0;
  o.protect_auto = true;
  CalibrateReport ra;
  auto pa = calibrate(*fx.model, fx.text, o, &ra);
  ASSERT_TRUE(pa.ok()) << pa.error();
  ASSERT_EQ(ra.protect_trials.size(), 3u);
  EXPECT_TRUE(ra.protect_trials[0].fits && ra.protect_trials[1].fits);
  EXPECT_FALSE(ra.protect_trials[2].fits);  // 64 rows of q8_0 over 256 tokens: 2.125 bits, 0.875 left
  const ProtectChoice& chosen = ra.protect_trials[ra.protect_chosen];
  for (const auto& t : ra.protect_trials)
    if (t.fits) {
      EXPECT_GT(t.measured_kld, 0.0);
      EXPECT_LE(chosen.measured_kld, t.measured_kld);
    }
  EXPECT_EQ(pa->protect_recent, chosen.recent);
  std::printf("auto protection at 3 bits: none %.5f, 0,32,q8_0 %.5f (measured KLD); chose %d recent\n",
              ra.protect_trials[0].measured_kld, ra.protect_trials[1].measured_kld, chosen.recent);
}

TEST(Policy, FileRoundTripsAndIsBoundToItsModel) {
  Fixture fx;
  CalibrateOptions o;
  o.n_ctx = 64;
  o.tokens = 256;
  o.bits = 4.5;
  auto pol = calibrate(*fx.model, fx.text, o);
  ASSERT_TRUE(pol.ok()) << pol.error();
  const std::string p = testing::TempDir() + std::to_string(getpid()) + "_tkv_rt.tkvp";
  ASSERT_TRUE(write_kv_policy(p, *pol).ok());
  auto back = read_kv_policy(p, fx.model->fingerprint());
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->n_layer, 3);
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(back->k[l].format, pol->k[l].format);
    EXPECT_EQ(back->v[l].heads[1].basis, pol->v[l].heads[1].basis);
    EXPECT_EQ(back->k[l].heads[0].mean, pol->k[l].heads[0].mean);
  }
  // Another model: refused by name.
  auto wrong = read_kv_policy(p, fx.other->fingerprint());
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().find("another model"), std::string::npos) << wrong.error();
  // Truncated anywhere, or one byte flipped: a clear error, never garbage.
  const std::string bytes = slurp(p);
  const std::string q = testing::TempDir() + std::to_string(getpid()) + "_tkv_bad.tkvp";
  for (size_t cut : {size_t(0), size_t(5), size_t(30), bytes.size() / 2, bytes.size() - 1}) {
    std::ofstream(q, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(cut));
    auto r = read_kv_policy(q);
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_NE(r.error().find(q), std::string::npos);
  }
  for (size_t at : {size_t(12), size_t(60), bytes.size() / 3, bytes.size() - 3}) {
    std::string c = bytes;
    c[at] = static_cast<char>(c[at] ^ 0x40);
    std::ofstream(q, std::ios::binary | std::ios::trunc).write(c.data(), std::streamsize(c.size()));
    auto r = read_kv_policy(q);
    ASSERT_FALSE(r.ok()) << "flip at " << at;
  }
  EXPECT_FALSE(read_kv_policy(testing::TempDir() + std::to_string(getpid()) + "_no_such.tkvp").ok());
  // A model file passed by mistake: refused by its magic, not read in.
  auto gguf = read_kv_policy(fx.path);
  ASSERT_FALSE(gguf.ok());
  EXPECT_NE(gguf.error().find("magic"), std::string::npos) << gguf.error();
  std::remove(p.c_str());
  std::remove(q.c_str());
}

TEST(Policy, CachesFromPoliciesAndPresetsRunAndCountBytesExactly) {
  Fixture fx;
  const ModelConfig& c = fx.model->config();
  CalibrateOptions o;
  o.n_ctx = 64;
  o.tokens = 256;
  o.bits = 3.5;
  auto pol = calibrate(*fx.model, fx.text, o);
  ASSERT_TRUE(pol.ok()) << pol.error();
  KvCacheOptions co;
  co.capacity = 100;
  co.policy = std::make_shared<const KvPolicy>(*pol);
  auto cache = KvCache::create(c.kv_shape(), co);
  ASSERT_TRUE(cache.ok()) << cache.error();
  // tqc3.5 at d = 32: 3 bits + 16 / 32 coded... exactly 3.5 bits per value stored.
  const size_t row = size_t(3.5 * 32 / 8);
  EXPECT_EQ((*cache)->k_bytes(), row * c.n_head_kv * 100 * c.n_layer);
  EXPECT_DOUBLE_EQ((*cache)->k_bits_per_value(), 3.5);
  const auto toks = fx.model->tokenizer().encode("the cat sat on the mat", true);
  std::vector<float> logits(c.n_vocab);
  ASSERT_TRUE(fx.model->forward(toks.data(), int(toks.size()), 0, **cache, 1, logits.data()).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  // Caches from one policy object share its calibrated codecs (built once);
  // another object, even with the same content, gets its own.
  auto again = KvCache::create(c.kv_shape(), co);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->k_rows(1).head(1), (*cache)->k_rows(1).head(1));
  KvCacheOptions co2 = co;
  co2.policy = std::make_shared<const KvPolicy>(*pol);
  auto other = KvCache::create(c.kv_shape(), co2);
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->k_rows(1).head(1), (*cache)->k_rows(1).head(1));
  EXPECT_EQ((*other)->k_rows(1).head(1)->row_bytes(), (*cache)->k_rows(1).head(1)->row_bytes());
  // A policy for another shape is refused.
  EXPECT_FALSE(KvCache::create(c.n_layer + 1, c.n_head_kv, c.head_dim, co).ok());
  // Presets: the per-layer formats of README's table (first and last layer
  // one step wider), and 90 tokens so that the 64 staged rows are coded and
  // later rows go straight to the preset's formats.
  std::ifstream readme(std::string(TKV_SOURCE_DIR) + "/README.md");
  const std::string rd{std::istreambuf_iterator<char>(readme), {}};
  std::vector<int32_t> long_toks;
  while (long_toks.size() < 90) long_toks.insert(long_toks.end(), toks.begin(), toks.end());
  long_toks.resize(90);
  for (const char* p : {"quality", "balanced", "compact", "tiny", "tiny-e8"}) {
    SCOPED_TRACE(p);
    // "| quality | tq5-ip | tq4.5-ip | tq6-ip | tq5-ip | ..."
    const size_t row = rd.find(std::string("\n| ") + p + " | ");
    ASSERT_NE(row, std::string::npos) << "README has no preset table row for " << p;
    std::vector<std::string> cells;
    std::stringstream line(rd.substr(row + 3, rd.find('\n', row + 1) - row - 3));
    for (std::string cell; std::getline(line, cell, '|');) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    ASSERT_GE(cells.size(), 5u);
    KvCacheOptions po;
    po.capacity = 100;
    ASSERT_TRUE(apply_kv_preset(p, c.n_layer, po).ok());
    auto pc = KvCache::create(c.kv_shape(), po);
    ASSERT_TRUE(pc.ok()) << pc.error();
    for (int l = 0; l < c.n_layer; ++l) {
      const bool edge = l == 0 || l == c.n_layer - 1;
      EXPECT_EQ((*pc)->type_k(l), cells[edge ? 3 : 1]) << "layer " << l;
      EXPECT_EQ((*pc)->type_v(l), cells[edge ? 4 : 2]) << "layer " << l;
    }
    EXPECT_EQ(po.protect_recent, std::string(p).rfind("tiny", 0) == 0 ? 32 : 0);
    ASSERT_TRUE(fx.model->forward(long_toks.data(), 60, 0, **pc, 1, logits.data()).ok());
    for (int l = 0; l < c.n_layer; ++l) EXPECT_TRUE((*pc)->staging(l)) << "60 of the 64 mean rows: still staged";
    ASSERT_TRUE(fx.model->forward(long_toks.data() + 60, 30, 60, **pc, 1, logits.data()).ok());
    for (int l = 0; l < c.n_layer; ++l) EXPECT_FALSE((*pc)->staging(l)) << "layer " << l;
    EXPECT_EQ((*pc)->n_tokens(), 90);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
  KvCacheOptions bad;
  EXPECT_FALSE(apply_kv_preset("huge", 3, bad).ok());
  // tqc without a calibration: a clear error.
  KvCacheOptions nocal;
  nocal.type_k = "tqc4";
  auto e = KvCache::create(c.kv_shape(), nocal);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("--kv-policy"), std::string::npos) << e.error();
}

}  // namespace
}  // namespace tkv
