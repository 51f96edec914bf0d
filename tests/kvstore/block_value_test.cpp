// The shared store's URLs, keys and values (kvstore/), without a Redis: the
// end-to-end checks are tests/kvstore/kvstore_test.py (ctest KvStore.*).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/kv_cache.h"
#include "kvstore/block_value.h"
#include "kvstore/kv_store.h"
#include "util/rng.h"

namespace tkv::kvstore {
namespace {

TEST(KvStoreUnit, UrlsAreParsedAndPasswordsRedacted) {
  auto u = parse_store_url("redis://:s3cret@10.0.0.5:6380/2");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 2);
  EXPECT_EQ(u->password, "s3cret");
  EXPECT_EQ(u->user, "");
  u = parse_store_url("redis://app:pw@[::1]:7000");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->user, "app");
  EXPECT_EQ(u->port, 7000);
  u = parse_store_url("redis://localhost");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 6379);
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:99999", "redis://h:1/x",
                          "redis://nopass@h:1", "redis://:@h:1"}) {
    auto r = parse_store_url(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_EQ(redact_store_url("redis://:s3cret@h:1"), "redis://:***@h:1");
  EXPECT_EQ(redact_store_url("redis://app:s3cret@h:1"), "redis://app:***@h:1");
  const auto e = parse_store_url("redis://:s3cret@h:x");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().find("s3cret"), std::string::npos) << e.error();
}

struct Fixture {
  std::shared_ptr<BlockPool> pool;
  std::vector<int32_t> tokens;
  uint64_t fp = 0;
  explicit Fixture(const char* fmt, uint64_t model = 7) {
    KvCacheOptions o;
    o.type_k = o.type_v = fmt;
    o.capacity = 128;
    o.mean_tokens = 16;
    auto l = KvLayout::create(2, 2, 64, o);
    EXPECT_TRUE(l.ok());
    pool = *BlockPool::create(*l, 16, 16);
    fp = store_fingerprint(model, **l, 16, 64);
    Rng rng(3);
    for (int i = 0; i < 64; ++i) tokens.push_back(int32_t(rng.below(1000)));
  }
  // A sequence of 48 tokens of random rows in the pool.
  std::unique_ptr<KvCache> sequence() {
    auto c = std::move(*KvCache::create_in(pool, 128));
    Rng rng(5);
    std::vector<float> k(48 * 2 * 64), v(48 * 2 * 64);
    for (auto& x : k) x = float(rng.gaussian());
    for (auto& x : v) x = float(rng.gaussian());
    for (int l = 0; l < 2; ++l) EXPECT_TRUE(c->append(l, 0, 48, k.data(), v.data()).ok());
    return c;
  }
};

TEST(KvStoreUnit, BlocksRoundTripIntoAnotherSequenceAndDamageIsRefused) {
  Fixture f("tq4");
  auto a = f.sequence();
  const auto keys = block_keys(f.fp, f.tokens.data(), 3, 16);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_NE(keys[0].chain, keys[1].chain);
  const auto m = a->means();
  std::vector<std::string> values;
  for (int k = 0; k < 3; ++k) values.push_back(encode_block(*f.pool, a->block_table()[k], f.fp, keys[k], k, f.tokens.data(), *m));
  // Adopted into a fresh sequence: the same rows and means.
  auto b = std::move(*KvCache::create_in(f.pool, 128));
  for (int k = 0; k < 3; ++k) {
    auto d = decode_block(values[k], *f.pool, f.fp, keys[k], k, f.tokens.data());
    ASSERT_TRUE(d.ok()) << d.error();
    EXPECT_EQ(d->means_key, means_key(m.get()));
    const int32_t blk = f.pool->allocate();
    copy_rows(*f.pool, blk, *d);
    ASSERT_TRUE(b->adopt_block(blk, d->means.get()).ok());
  }
  EXPECT_EQ(b->n_tokens(), 48);
  EXPECT_EQ(means_key(b->means().get()), means_key(m.get()));
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < 48; ++t)
      EXPECT_EQ(std::memcmp(a->k_row(l, t, 1), b->k_row(l, t, 1), f.pool->layout().layer(l).k_row), 0);
  // Damage anywhere, another key, index, tokens or model: refused.
  std::string v = values[1];
  v[v.size() / 2] ^= 1;
  EXPECT_FALSE(decode_block(v, *f.pool, f.fp, keys[1], 1, f.tokens.data()).ok());
  EXPECT_FALSE(decode_block(values[1].substr(0, values[1].size() - 1), *f.pool, f.fp, keys[1], 1, f.tokens.data()).ok());
  EXPECT_FALSE(decode_block(values[1] + "x", *f.pool, f.fp, keys[1], 1, f.tokens.data()).ok());
  EXPECT_FALSE(decode_block(values[1], *f.pool, f.fp, keys[2], 2, f.tokens.data()).ok());
  EXPECT_FALSE(decode_block(values[1], *f.pool, f.fp ^ 1, keys[1], 1, f.tokens.data()).ok());
  std::vector<int32_t> other = f.tokens;
  other[20] ^= 1;
  EXPECT_FALSE(decode_block(values[1], *f.pool, f.fp, block_keys(f.fp, other.data(), 3, 16)[1], 1, other.data()).ok());
  EXPECT_FALSE(decode_block(std::string(), *f.pool, f.fp, keys[0], 0, f.tokens.data()).ok());
}

TEST(KvStoreUnit, FingerprintsSeparateModelsFormatsSeedsAndBlockSizes) {
  KvCacheOptions o;
  auto l = *KvLayout::create(2, 2, 64, o);
  const uint64_t base = store_fingerprint(1, *l, 256, 512);
  EXPECT_NE(base, store_fingerprint(2, *l, 256, 512));
  EXPECT_NE(base, store_fingerprint(1, *l, 128, 512));
  EXPECT_NE(base, store_fingerprint(1, *l, 256, 256));
  o.seed ^= 1;
  EXPECT_NE(base, store_fingerprint(1, **KvLayout::create(2, 2, 64, o), 256, 512));
  o = KvCacheOptions();
  o.type_k = "q8_0";
  EXPECT_NE(base, store_fingerprint(1, **KvLayout::create(2, 2, 64, o), 256, 512));
  o = KvCacheOptions();
  o.mean_center = false;
  EXPECT_NE(base, store_fingerprint(1, **KvLayout::create(2, 2, 64, o), 256, 512));
  EXPECT_EQ(store_refusal(*l), "");
  KvShape windowed(2, 2, 64);
  windowed.window = {0, 128};
  EXPECT_NE(store_refusal(**KvLayout::create(windowed, KvCacheOptions())).find("sliding-window"), std::string::npos);
}

}  // namespace
}  // namespace tkv::kvstore
