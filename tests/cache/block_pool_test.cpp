// The block pool (cache/block_pool.h): sizes refused, every block
// allocated once, reference counts, the prefix cache and its LRU eviction,
// copy-on-write of shared blocks in every layer, and the pool's counts after
// every step of random operations. Inputs are fresh random data each run
// (the seed is printed on failure; TKV_TEST_SEED=<n> replays one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/kv_cache.h"
#include "cache/kv_layout.h"
#include "paged_test_util.h"
#include "util/rng.h"

namespace tkv {
namespace {

using paged_test::block_tokens;
using paged_test::expect_stats_add_up;
using paged_test::fresh_seed;

std::shared_ptr<const KvLayout> small_layout(int n_layer = 2, const char* fmt = "q8_0", int d = 32) {
  KvCacheOptions o;
  o.type_k = fmt;
  o.type_v = "f16";
  o.capacity = 256;
  auto l = KvLayout::create(n_layer, 2, d, o);
  EXPECT_TRUE(l.ok()) << l.error();
  return *l;
}

void fill_block(BlockPool& p, int32_t b, Rng& rng) {
  for (int l = 0; l < p.layout().n_layer(); ++l) {
    for (size_t i = 0; i < p.k_block_bytes(l); ++i) p.k_base(l)[size_t(b) * p.k_block_bytes(l) + i] = uint8_t(rng.next());
    for (size_t i = 0; i < p.v_block_bytes(l); ++i) p.v_base(l)[size_t(b) * p.v_block_bytes(l) + i] = uint8_t(rng.next());
  }
}
std::vector<uint8_t> block_content(const BlockPool& p, int32_t b) {
  std::vector<uint8_t> out;
  for (int l = 0; l < p.layout().n_layer(); ++l) {
    const uint8_t* k = p.k_base(l) + size_t(b) * p.k_block_bytes(l);
    const uint8_t* v = p.v_base(l) + size_t(b) * p.v_block_bytes(l);
    out.insert(out.end(), k, k + p.k_block_bytes(l));
    out.insert(out.end(), v, v + p.v_block_bytes(l));
  }
  return out;
}

TEST(BlockPool, RejectsBadSizes) {
  auto L = small_layout();
  EXPECT_FALSE(BlockPool::create(L, 8, 4).ok());
  EXPECT_FALSE(BlockPool::create(L, 48, 4).ok());
  EXPECT_FALSE(BlockPool::create(L, 8192, 4).ok());
  EXPECT_FALSE(BlockPool::create(L, 16, 0).ok());
  EXPECT_FALSE(BlockPool::create(nullptr, 16, 4).ok());
  auto p = BlockPool::create(L, 32, 5);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->block_shift(), 5);
  EXPECT_EQ((*p)->block_bytes(), L->bytes_per_token() * 32);
  EXPECT_EQ(BlockPool::blocks_for_budget(*L, 32, L->bytes_per_token() * 32 * 7 + 5), 7);
}

TEST(BlockPool, AllocatesEveryBlockOnceThenFails) {
  const int n = 7;
  auto p = *BlockPool::create(small_layout(), 16, n);
  std::set<int32_t> got;
  for (int i = 0; i < n; ++i) {
    const int32_t b = p->allocate();
    ASSERT_GE(b, 0);
    ASSERT_LT(b, n);
    EXPECT_TRUE(got.insert(b).second) << "block " << b << " handed out twice";
    EXPECT_EQ(p->refs(b), 1);
    EXPECT_EQ(p->available(), n - i - 1);
    expect_stats_add_up(*p);
  }
  EXPECT_EQ(p->allocate(), -1);
  EXPECT_EQ(p->stats().in_use, n);
  EXPECT_EQ(p->stats().free, 0);
  // Released blocks come back, and only those.
  p->release(3);
  p->release(5);
  EXPECT_EQ(p->available(), 2);
  std::set<int32_t> again = {p->allocate(), p->allocate()};
  EXPECT_EQ(again, (std::set<int32_t>{3, 5}));
  EXPECT_EQ(p->allocate(), -1);
  for (int32_t b : got) p->release(b);
  expect_stats_add_up(*p);
  EXPECT_EQ(p->stats().in_use, 0);
  EXPECT_EQ(p->stats().free, n);
  EXPECT_EQ(p->stats().evictions, 0);
}

TEST(BlockPool, ReferenceCounts) {
  auto p = *BlockPool::create(small_layout(), 16, 3);
  const int32_t b = p->allocate();
  p->retain(b);
  p->retain(b);
  EXPECT_EQ(p->refs(b), 3);
  EXPECT_EQ(p->stats().in_use, 1);
  p->release(b);
  EXPECT_EQ(p->refs(b), 2);
  p->release(b);
  EXPECT_EQ(p->refs(b), 1);
  EXPECT_EQ(p->available(), 2);
  p->release(b);
  EXPECT_EQ(p->refs(b), 0);
  EXPECT_EQ(p->available(), 3);
  p->release(b);  // an extra release is ignored, not a double free
  EXPECT_EQ(p->refs(b), 0);
  expect_stats_add_up(*p);
  std::set<int32_t> all = {p->allocate(), p->allocate(), p->allocate()};
  EXPECT_EQ(all, (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(p->allocate(), -1);
}

TEST(BlockPool, PublishLookupCacheAndLruEviction) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const int n = 5, B = 16;
  auto p = *BlockPool::create(small_layout(), B, n);
  const auto t1 = block_tokens(rng, B), t2 = block_tokens(rng, B), other = block_tokens(rng, B);
  const uint64_t k1 = BlockPool::chain_hash(0, t1.data(), B);
  const uint64_t k2 = BlockPool::chain_hash(k1, t2.data(), B);
  EXPECT_NE(k1, k2);
  EXPECT_EQ(k1, BlockPool::chain_hash(0, t1.data(), B));
  auto means = std::make_shared<SequenceMeans>();
  means->k = {{1.0f, 2.0f}};
  const int32_t b1 = p->allocate(), b2 = p->allocate();
  fill_block(*p, b1, rng);
  const auto content1 = block_content(*p, b1);

  // Nothing published yet.
  EXPECT_EQ(p->lookup(k1, t1.data()), -1);
  p->publish(b1, k1, t1.data(), means);
  p->publish(b2, k2, t2.data(), nullptr);
  // A hit is the same block, retained, with its means.
  std::shared_ptr<const SequenceMeans> got;
  EXPECT_EQ(p->lookup(k1, t1.data(), &got), b1);
  EXPECT_EQ(got, means);
  EXPECT_EQ(p->refs(b1), 2);
  p->release(b1);
  // Same key, other tokens (a collision): no hit. Other key: no hit.
  EXPECT_EQ(p->lookup(k1, other.data()), -1);
  EXPECT_EQ(p->lookup(k1, t2.data()), -1);
  EXPECT_EQ(p->lookup(k2, t1.data()), -1);
  EXPECT_EQ(p->refs(b1), 1);
  // Publishing the same tokens again from another block keeps the first.
  const int32_t dup = p->allocate();
  p->publish(dup, k1, t1.data(), nullptr);
  EXPECT_EQ(p->lookup(k1, t1.data()), b1);
  p->release(b1);
  p->release(dup);  // unpublished: free, not cached
  expect_stats_add_up(*p);

  // Released to zero: cached (b1 first, then b2: b1 is the least recent).
  p->release(b1);
  EXPECT_EQ(p->refs(b1), 0);
  EXPECT_EQ(p->stats().cached, 1);
  p->release(b2);
  EXPECT_EQ(p->stats().cached, 2);
  EXPECT_EQ(p->stats().in_use, 0);
  EXPECT_EQ(p->available(), n);
  expect_stats_add_up(*p);
  // A cached block is reused by lookup, bytes intact; released again it goes
  // to the back of the LRU list (now b2 is the least recent).
  EXPECT_EQ(p->lookup(k1, t1.data(), &got), b1);
  EXPECT_EQ(got, means);
  EXPECT_EQ(p->stats().cached, 1);
  EXPECT_EQ(p->stats().in_use, 1);
  EXPECT_EQ(block_content(*p, b1), content1);
  expect_stats_add_up(*p);
  p->release(b1);
  EXPECT_EQ(p->stats().cached, 2);

  // allocate() takes the free blocks first, then evicts least recent first.
  std::vector<int32_t> held;
  for (int i = 0; i < n - 2; ++i) {
    held.push_back(p->allocate());
    ASSERT_GE(held.back(), 0);
    EXPECT_NE(held.back(), b1);
    EXPECT_NE(held.back(), b2);
  }
  EXPECT_EQ(p->stats().evictions, 0);
  EXPECT_EQ(p->stats().cached, 2);
  EXPECT_EQ(p->allocate(), b2);
  EXPECT_EQ(p->stats().evictions, 1);
  EXPECT_EQ(p->stats().cached, 1);
  EXPECT_EQ(p->lookup(k2, t2.data()), -1);  // evicted: gone from the index
  expect_stats_add_up(*p);
  EXPECT_EQ(p->allocate(), b1);
  EXPECT_EQ(p->stats().evictions, 2);
  EXPECT_EQ(p->lookup(k1, t1.data()), -1);
  EXPECT_EQ(p->allocate(), -1);
  EXPECT_EQ(p->stats().evictions, 2);
  expect_stats_add_up(*p);
  // Released after eviction: no longer published, so free, not cached.
  p->release(b1);
  p->release(b2);
  EXPECT_EQ(p->stats().cached, 0);
  EXPECT_EQ(p->stats().free, 2);
  expect_stats_add_up(*p);
}

TEST(BlockPool, MakeWritableCopiesASharedBlockInEveryLayer) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  auto p = *BlockPool::create(small_layout(3, "tq4", 80), 16, 4);
  const int32_t b = p->allocate();
  fill_block(*p, b, rng);
  const auto before = block_content(*p, b);
  p->retain(b);  // refs 2: someone else holds it too
  const int32_t c = p->make_writable(b);
  ASSERT_GE(c, 0);
  EXPECT_NE(c, b);
  EXPECT_EQ(p->refs(b), 1);
  EXPECT_EQ(p->refs(c), 1);
  EXPECT_EQ(block_content(*p, c), before);
  // Writing the copy leaves the original intact.
  fill_block(*p, c, rng);
  EXPECT_EQ(block_content(*p, b), before);
  EXPECT_NE(block_content(*p, c), before);
  expect_stats_add_up(*p);
  EXPECT_EQ(p->stats().in_use, 2);

  // Sole holder: the block itself, taken out of the prefix cache.
  const auto t = block_tokens(rng, 16);
  const uint64_t key = BlockPool::chain_hash(0, t.data(), 16);
  p->publish(c, key, t.data(), nullptr);
  EXPECT_EQ(p->make_writable(c), c);
  EXPECT_EQ(p->lookup(key, t.data()), -1);
  p->release(c);
  EXPECT_EQ(p->stats().cached, 0);  // unpublished: free
  expect_stats_add_up(*p);

  // No block left for the copy: -1, and the references are untouched.
  std::vector<int32_t> rest;
  for (int32_t x; (x = p->allocate()) >= 0;) rest.push_back(x);
  p->retain(b);
  EXPECT_EQ(p->make_writable(b), -1);
  EXPECT_EQ(p->refs(b), 2);
  EXPECT_EQ(block_content(*p, b), before);
  expect_stats_add_up(*p);
}

// A random sequence of operations against a model of the pool.
TEST(BlockPool, StatsAddUpAfterEveryStepOfRandomOperations) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int round = 0; round < 20; ++round) {
    const int n = 1 + int(rng.below(12)), B = 16;
    auto p = *BlockPool::create(small_layout(1, "q8_0", 32), B, n);
    std::vector<int> refs(n, 0);
    std::map<int32_t, std::vector<int32_t>> published;  // block -> its tokens
    std::map<int32_t, uint64_t> keys;
    int64_t evictions = 0;
    uint64_t next_token = 1;
    auto held = [&] {
      std::vector<int32_t> h;
      for (int b = 0; b < n; ++b)
        if (refs[b] > 0) h.push_back(b);
      return h;
    };
    for (int step = 0; step < 400; ++step) {
      SCOPED_TRACE("round " + std::to_string(round) + " step " + std::to_string(step));
      const int op = int(rng.below(6));
      const auto h = held();
      if (op == 0 || h.empty()) {  // allocate
        bool unpublished_idle = false;
        for (int b = 0; b < n; ++b) unpublished_idle |= refs[b] == 0 && !published.count(b);
        const int32_t b = p->allocate();
        if (b < 0) {
          for (int x = 0; x < n; ++x) ASSERT_GT(refs[x], 0) << "allocate failed with block " << x << " idle";
        } else {
          ASSERT_LT(b, n);
          ASSERT_EQ(refs[b], 0) << "allocate handed out a held block";
          if (published.count(b)) {  // eviction: only when nothing unpublished was idle
            ASSERT_FALSE(unpublished_idle);
            published.erase(b);
            ++evictions;
          }
          refs[b] = 1;
        }
      } else if (op == 1) {  // retain
        const int32_t b = h[rng.below(uint32_t(h.size()))];
        p->retain(b);
        ++refs[b];
      } else if (op == 2) {  // release
        const int32_t b = h[rng.below(uint32_t(h.size()))];
        p->release(b);
        --refs[b];
      } else if (op == 3) {  // publish
        const int32_t b = h[rng.below(uint32_t(h.size()))];
        std::vector<int32_t> t(B);
        for (auto& x : t) x = int32_t(next_token++);
        const uint64_t key = rng.below(4);  // few keys: collisions on purpose
        p->publish(b, key, t.data(), nullptr);
        if (!published.count(b)) {
          published[b] = t;
          keys[b] = key;
        }
      } else if (op == 4 && !published.empty()) {  // lookup a published block (or a wrong token list)
        auto it = published.begin();
        std::advance(it, rng.below(uint32_t(published.size())));
        std::vector<int32_t> t = it->second;
        const bool wrong = rng.below(3) == 0;
        if (wrong) t[rng.below(B)] = -1;
        const int32_t got = p->lookup(keys[it->first], t.data());
        if (wrong) {
          ASSERT_EQ(got, -1);
        } else {
          ASSERT_EQ(got, it->first);
          ++refs[got];
        }
      } else if (op == 5) {  // make_writable
        const int32_t b = h[rng.below(uint32_t(h.size()))];
        bool free_any = false;
        for (int x = 0; x < n; ++x) free_any |= refs[x] == 0;
        const int32_t c = p->make_writable(b);
        if (refs[b] == 1) {
          ASSERT_EQ(c, b);
          published.erase(b);
        } else if (!free_any) {
          ASSERT_EQ(c, -1);
        } else {
          ASSERT_GE(c, 0);
          ASSERT_NE(c, b);
          ASSERT_EQ(refs[c], 0);
          if (published.count(c)) {
            published.erase(c);
            ++evictions;
          }
          --refs[b];
          refs[c] = 1;
        }
      }
      // Invariants after every step.
      const BlockPoolStats s = p->stats();
      int64_t in_use = 0, cached = 0;
      for (int b = 0; b < n; ++b) {
        ASSERT_EQ(p->refs(b), refs[b]) << "block " << b;
        in_use += refs[b] > 0;
        cached += refs[b] == 0 && published.count(b);
      }
      ASSERT_EQ(s.in_use + s.cached + s.free, n);
      ASSERT_EQ(s.in_use, in_use);
      ASSERT_EQ(s.cached, cached);
      ASSERT_EQ(s.free, n - in_use - cached);
      ASSERT_EQ(p->available(), s.free + s.cached);
      ASSERT_EQ(s.evictions, evictions);
    }
  }
}

// ---------------------------------------------------------------------------
// 4. Prefix sharing through KvCache

}  // namespace
}  // namespace tkv
