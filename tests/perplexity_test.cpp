// Perplexity against an independent computation on a model the test writes;
// KL divergence against its own base, and against a coarse cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "eval/perplexity.h"
#include "model/gen_model.h"

namespace tkv {
namespace {

struct Fixture {
  std::string path, text;
  std::unique_ptr<Model> model;
  Fixture() {
    GenModelOptions o;
    o.layers = 2;
    o.dim = 64;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 32;
    o.ffn = 96;
    o.weight_scale = 3.0f;  // peakier predictions than the default init
    path = testing::TempDir() + "tkv_ppl_model.gguf";
    EXPECT_TRUE(generate_model(o, nullptr, path).ok());
    model = std::move(*Model::load(path));
    for (int i = 0; i < 40; ++i) text += "the cat sat on the mat, then " + std::to_string(i * 7) + " dogs ran.\r\n";
  }
  ~Fixture() { std::remove(path.c_str()); }
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
    auto cache = KvCache::create(f.model->config().n_layer, f.model->config().n_head_kv, f.model->config().head_dim, co);
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
  o.kl_base = testing::TempDir() + "tkv_ppl_base.kl";
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
