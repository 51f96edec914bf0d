// The sampler (greedy, seeds, top-k / top-p / min-p, repetition penalty).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "model/sampler.h"

namespace tkv {
namespace {

TEST(Sampler, GreedyTopKAndSeeds) {
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 0.5f};
  SamplerOptions g;
  g.temperature = 0;
  EXPECT_EQ(Sampler(g).sample(logits.data(), 5, {}), 1);
  SamplerOptions k1;
  k1.top_k = 1;
  k1.seed = 9;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Sampler(k1).sample(logits.data(), 5, {}), 1);
  // Same seed, same draws; temperature high enough to spread them.
  SamplerOptions t;
  t.temperature = 5.0f;
  t.top_k = 0;
  t.top_p = 1.0f;
  t.min_p = 0.0f;
  t.seed = 123;
  Sampler a(t), b(t);
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = a.sample(logits.data(), 5, {});
    EXPECT_EQ(x, b.sample(logits.data(), 5, {}));
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 5u);
  // min-p 0.9 keeps only tokens within 90% of the best: 1 and 2 here (at T=1).
  SamplerOptions mp;
  mp.temperature = 1.0f;
  mp.top_k = 0;
  mp.top_p = 1.0f;
  mp.min_p = 0.9f;
  Sampler m(mp);
  for (int i = 0; i < 100; ++i) {
    const int32_t x = m.sample(logits.data(), 5, {});
    EXPECT_TRUE(x == 1 || x == 2) << x;
  }
  // top-p keeps the fewest most likely tokens whose probability reaches p
  // (llama.cpp's rule), then renormalises. Probabilities 0.4, 0.3, 0.2, 0.1
  // (listed out of order): p = 0.65 keeps tokens 3 and 1 (0.4 + 0.3), drawn
  // 4:3; p = 0.35 keeps token 3 alone. Without the cut, tokens 0 and 2 would
  // come up in 30 % of 4000 draws.
  const std::vector<float> quarter = {std::log(0.2f), std::log(0.3f), std::log(0.1f), std::log(0.4f)};
  SamplerOptions tp;
  tp.temperature = 1.0f;
  tp.top_k = 0;
  tp.min_p = 0.0f;
  tp.seed = 7;
  tp.top_p = 0.65f;
  Sampler p(tp);
  int count[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4000; ++i) ++count[p.sample(quarter.data(), 4, {})];
  EXPECT_EQ(count[0] + count[2], 0) << count[0] << " " << count[2];
  EXPECT_NEAR(count[3] / 4000.0, 4.0 / 7.0, 0.03) << count[3];
  tp.top_p = 0.35f;
  Sampler p1(tp);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(p1.sample(quarter.data(), 4, {}), 3);
  // Repetition penalty turns greedy away from a repeated token.
  SamplerOptions rp;
  rp.temperature = 0;
  rp.repeat_penalty = 2.0f;
  EXPECT_EQ(Sampler(rp).sample(logits.data(), 5, {1}), 2);
}

}  // namespace
}  // namespace tkv
