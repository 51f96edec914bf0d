// Perplexity against an independent computation on a model the test writes;
// KL divergence against its own base, and against a coarse cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "eval/perplexity.h"
#include "model/gen_model.h"
#include "temp_path.h"
#include "test_models.h"

namespace tkv {
namespace {

struct Fixture {
  TempPath path{"tkv_ppl_model.gguf"};
  std::string text;
  std::unique_ptr<Model> model;
  Fixture() {
    GenModelOptions o = eval_model_options();
    o.weight_scale = 3.0f;  // peakier predictions than the default init
    EXPECT_TRUE(generate_model(o, nullptr, path).ok());
    model = std::move(*Model::load(path));
    for (int i = 0; i < 40; ++i) text += "the cat sat on the mat, then " + std::to_string(i * 7) + " dogs ran.\r\n";
  }
};

TEST(Perplexity, EqualsAnIndependentComputation) {
  Fixture f;
  PerplexityOptions o;
  o.n_ctx = 32;
  o.batch = 11;  // several forward calls per chunk
  o.threads = 2;
  o.cache.type_k = o.cache.type_v = "f32";
  const std::string text = normalize_newlines(f.text);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  auto r = perplexity(*f.model, text, o);
  ASSERT_TRUE(r.ok()) << r.error();
  // Independent: chunks of 32 tokens, BOS first, score positions 16..30
  // predicting the next token; one forward call per chunk.
  const auto toks = f.model->tokenizer().encode(text, true);
  const int n = 32, V = f.model->config().n_vocab;
  const int chunks = static_cast<int>(toks.size() / n);
  ASSERT_EQ(r->chunks, chunks);
  double nll = 0;
  int count = 0;
  std::vector<float> logits(size_t(n) * V);
  for (int c = 0; c < chunks; ++c) {
    std::vector<int32_t> t(toks.begin() + c * n, toks.begin() + (c + 1) * n);
    t[0] = f.model->tokenizer().bos();
    KvCacheOptions co;
    co.type_k = co.type_v = "f32";
    co.capacity = n;
    auto cache = KvCache::create(f.model->config().kv_shape(), co);
    ASSERT_TRUE(f.model->forward(t.data(), n, 0, **cache, 1, logits.data(), true).ok());
    for (int i = n / 2; i < n - 1; ++i) {
      const float* row = &logits[size_t(i) * V];
      double mx = row[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      double sum = 0;
      for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
      nll -= row[t[i + 1]] - mx - std::log(sum);
      ++count;
    }
  }
  EXPECT_EQ(r->scored, count);
  EXPECT_NEAR(r->ppl / std::exp(nll / count), 1.0, 1e-6);
  EXPECT_GT(r->ppl_err, 0.0);
  EXPECT_EQ(r->running.size(), size_t(chunks));
}

TEST(Perplexity, KlAgainstOwnBaseIsZeroAndPositiveForTq2) {
  Fixture f;
  PerplexityOptions o;
  o.n_ctx = 32;
  o.cache.type_k = o.cache.type_v = "f32";
  o.kl_base = testing::TempDir() + std::to_string(getpid()) + "_tkv_ppl_base.kl";
  o.kl_write = true;
  const std::string text = normalize_newlines(f.text);
  ASSERT_TRUE(perplexity(*f.model, text, o).ok());
  o.kl_write = false;
  auto self = perplexity(*f.model, text, o);
  ASSERT_TRUE(self.ok()) << self.error();
  ASSERT_TRUE(self->has_kl);
  EXPECT_EQ(self->kl.mean, 0.0);
  EXPECT_EQ(self->kl.max, 0.0);
  EXPECT_EQ(self->kl.same_top, 100.0);
  o.cache.type_k = o.cache.type_v = "tq2";
  o.cache.mean_tokens = 8;
  auto tq2 = perplexity(*f.model, text, o);
  ASSERT_TRUE(tq2.ok());
  EXPECT_GT(tq2->kl.mean, 0.0);
  EXPECT_LT(tq2->kl.same_top, 100.0);
  EXPECT_GE(tq2->kl.max, tq2->kl.p99);
  EXPECT_GE(tq2->kl.p99, tq2->kl.median);
  // A base from another text or model is refused with a clear error.
  auto other_text = perplexity(*f.model, text + " and more words to change the tokens", o);
  ASSERT_FALSE(other_text.ok());
  EXPECT_NE(other_text.error().find("another text"), std::string::npos) << other_text.error();
  std::remove(o.kl_base.c_str());
}

// The KL statistics against a computation of their own: every scored
// position's logits under an f32 cache (the base) and a tq2 cache, log-softmax
// in double, KL(base || tq2), its mean and standard error (two-pass variance),
// the 99th percentile and median (linear interpolation between order
// statistics, llama.cpp's definition), the change in the correct token's
// probability and how often the argmax agrees.
TEST(Perplexity, KlStatisticsEqualAnIndependentComputation) {
  Fixture f;
  PerplexityOptions o;
  o.n_ctx = 32;
  o.cache.type_k = o.cache.type_v = "f32";
  o.kl_base = testing::TempDir() + std::to_string(getpid()) + "_tkv_ppl_base2.kl";
  o.kl_write = true;
  const std::string text = normalize_newlines(f.text);
  ASSERT_TRUE(perplexity(*f.model, text, o).ok());
  o.kl_write = false;
  o.cache.type_k = o.cache.type_v = "tq2";
  o.cache.mean_tokens = 8;
  auto r = perplexity(*f.model, text, o);
  ASSERT_TRUE(r.ok()) << r.error();
  std::remove(o.kl_base.c_str());

  const auto toks = f.model->tokenizer().encode(text, true);
  const ModelConfig& c = f.model->config();
  const int n = 32, V = c.n_vocab, chunks = static_cast<int>(toks.size() / n);
  auto log_softmax = [&](const float* row) {
    double mx = row[0];
    for (int v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    std::vector<double> lp(V);
    for (int v = 0; v < V; ++v) lp[v] = row[v] - mx - std::log(sum);
    return lp;
  };
  std::vector<double> kl, dp;
  int same = 0;
  for (int ch = 0; ch < chunks; ++ch) {
    std::vector<int32_t> t(toks.begin() + ch * n, toks.begin() + (ch + 1) * n);
    t[0] = f.model->tokenizer().bos();
    std::vector<float> lb(size_t(n) * V), lq(size_t(n) * V);
    for (int side = 0; side < 2; ++side) {
      KvCacheOptions co;
      co.type_k = co.type_v = side ? "tq2" : "f32";
      co.mean_tokens = 8;
      co.capacity = n;
      auto cache = KvCache::create(c.kv_shape(), co);
      ASSERT_TRUE(f.model->forward(t.data(), n, 0, **cache, 1, (side ? lq : lb).data(), true).ok());
    }
    for (int i = n / 2; i < n - 1; ++i) {
      const auto pb = log_softmax(&lb[size_t(i) * V]), pq = log_softmax(&lq[size_t(i) * V]);
      double k = 0;
      for (int v = 0; v < V; ++v) k += std::exp(pb[v]) * (pb[v] - pq[v]);
      kl.push_back(k);
      dp.push_back(std::exp(pq[t[i + 1]]) - std::exp(pb[t[i + 1]]));
      same += std::max_element(pb.begin(), pb.end()) - pb.begin() == std::max_element(pq.begin(), pq.end()) - pq.begin();
    }
  }
  const double m = static_cast<double>(kl.size());
  ASSERT_EQ(r->scored, static_cast<int64_t>(kl.size()));
  double mean = 0, var = 0, dmean = 0;
  for (double x : kl) mean += x / m;
  for (double x : kl) var += (x - mean) * (x - mean) / (m - 1);
  for (double x : dp) dmean += x / m;
  std::vector<double> sorted = kl;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double q) {
    const double pos = q * (m - 1);
    const size_t i = static_cast<size_t>(pos);
    return i + 1 < sorted.size() ? sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]) : sorted[i];
  };
  ASSERT_GT(mean, 1e-4);  // tq2 is coarse enough that every figure is far from 0
  // The engine stores the base as f32 log-probabilities: agreement to ~1e-5 relative.
  EXPECT_NEAR(r->kl.mean / mean, 1.0, 1e-4);
  EXPECT_NEAR(r->kl.mean_err / std::sqrt(var / m), 1.0, 1e-3);
  EXPECT_NEAR(r->kl.p99 / pct(0.99), 1.0, 1e-3);
  EXPECT_NEAR(r->kl.median / pct(0.5), 1.0, 1e-3);
  EXPECT_NEAR(r->kl.max / sorted.back(), 1.0, 1e-4);
  EXPECT_NEAR(r->kl.dp_mean, dmean, 1e-6);
  EXPECT_NEAR(r->kl.same_top, 100.0 * same / m, 1e-9);
  EXPECT_LT(r->kl.same_top, 100.0);
}

TEST(Perplexity, TooShortTextIsAnError) {
  Fixture f;
  PerplexityOptions o;
  o.n_ctx = 4096;
  auto r = perplexity(*f.model, "short", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("fewer than one chunk"), std::string::npos);
}

}  // namespace
}  // namespace tkv
