// KV cache (formats, memory accounting, f16 staging then exact mean centring)
// and the sampler (greedy, seeds, top-k / top-p / min-p, repetition penalty).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "cache/kv_cache.h"
#include "model/sampler.h"
#include "util/rng.h"

namespace tkv {
namespace {

TEST(KvCache, MemoryIsExactlyRowsTimesCapacity) {
  KvCacheOptions o;
  o.type_k = "tq4";
  o.type_v = "q8_0";
  o.capacity = 100;
  auto c = KvCache::create(3, 2, 128, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->k_bytes(), size_t(66) * 2 * 100 * 3);
  EXPECT_EQ((*c)->v_bytes(), size_t(136) * 2 * 100 * 3);
  EXPECT_DOUBLE_EQ((*c)->k_bits_per_value(), 4.125);
  o.type_k = "tq9";
  auto bad = KvCache::create(3, 2, 128, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("tq9"), std::string::npos);
}

TEST(KvCache, StagesInF16ThenCentresAndQuantizesEverything) {
  KvCacheOptions o;
  o.capacity = 200;
  o.mean_tokens = 64;
  const int H = 2, d = 64;
  auto c = KvCache::create(1, H, d, o);
  ASSERT_TRUE(c.ok());
  Rng rng(1);
  auto rows = [&](int n) {
    std::vector<float> x(size_t(n) * H * d);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(rng.gaussian()) + ((i % d) < 8 ? 20.0f : 0.0f);  // biased channels
    return x;
  };
  auto k1 = rows(40), v1 = rows(40);
  ASSERT_TRUE((*c)->append(0, 0, 40, k1.data(), v1.data()).ok());
  EXPECT_TRUE((*c)->staging(0));
  EXPECT_EQ((*c)->k_rows(0).codec->name(), "f16");
  EXPECT_EQ((*c)->mu_k(0), nullptr);
  EXPECT_GT((*c)->staging_bytes(), 0u);
  auto k2 = rows(30), v2 = rows(30);
  ASSERT_TRUE((*c)->append(0, 40, 30, k2.data(), v2.data()).ok());
  EXPECT_FALSE((*c)->staging(0));
  EXPECT_EQ((*c)->k_rows(0).codec->name(), "tq4");
  ASSERT_NE((*c)->mu_k(0), nullptr);
  EXPECT_NEAR((*c)->mu_k(0)[0], 20.0f, 0.5f);  // the bias is in the mean
  EXPECT_EQ((*c)->staging_bytes(), 0u);
  // Every stored row decodes to its input (+ mu) within tq4's error.
  const KvRows kr = (*c)->k_rows(0);
  std::vector<float> dec(d);
  double e = 0, n = 0;
  for (int t = 0; t < 70; ++t) {
    const float* src = t < 40 ? &k1[size_t(t) * H * d] : &k2[size_t(t - 40) * H * d];
    kr.codec->dequantize(kr.data + t * kr.token_stride, 1, dec.data());
    for (int i = 0; i < d; ++i) {
      e += std::pow(dec[i] + (*c)->mu_k(0)[i] - src[i], 2);
      n += src[i] * src[i];
    }
  }
  EXPECT_LT(e / n, 0.01);  // centred tq4 error relative to the (biased) rows
  // Positions must come in order; the capacity is enforced.
  EXPECT_FALSE((*c)->append(0, 5, 1, k1.data(), v1.data()).ok());
  std::vector<float> big(size_t(200) * H * d);
  auto s = (*c)->append(0, 70, 200, big.data(), big.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("-c"), std::string::npos) << s.message();
}

TEST(KvCache, LargeFirstBatchCentresImmediately) {
  KvCacheOptions o;
  o.capacity = 128;
  auto c = KvCache::create(1, 1, 64, o);
  std::vector<float> k(size_t(80) * 64, 1.0f), v(k.size(), 2.0f);
  ASSERT_TRUE((*c)->append(0, 0, 80, k.data(), v.data()).ok());
  EXPECT_FALSE((*c)->staging(0));
  ASSERT_NE((*c)->mu_v(0), nullptr);
  EXPECT_FLOAT_EQ((*c)->mu_v(0)[3], 2.0f);
  o.mean_center = false;
  auto off = KvCache::create(1, 1, 64, o);
  ASSERT_TRUE((*off)->append(0, 0, 10, k.data(), v.data()).ok());
  EXPECT_EQ((*off)->mu_k(0), nullptr);
  EXPECT_FALSE((*off)->staging(0));
}

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
