// KV cache (formats, memory accounting, f16 staging then exact mean centring).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "cache/kv_cache.h"
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

}  // namespace
}  // namespace tkv
