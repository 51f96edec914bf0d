// Helpers of the paged-cache, block-pool and hardening tests.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "attention/attention.h"
#include "cache/block_pool.h"
#include "cache/kv_cache.h"
#include "util/rng.h"

namespace tkv {
namespace paged_test {

// A fresh seed per run (printed on failure); TKV_TEST_SEED=<n> replays one.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("TKV_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// The pool's counts add up: in use + cached + free = all blocks.
inline void expect_stats_add_up(const BlockPool& p) {
  const BlockPoolStats s = p.stats();
  EXPECT_EQ(s.n_blocks, p.n_blocks());
  EXPECT_EQ(s.in_use + s.cached + s.free, s.n_blocks);
  EXPECT_GE(s.in_use, 0);
  EXPECT_GE(s.cached, 0);
  EXPECT_GE(s.free, 0);
  EXPECT_EQ(p.available(), s.free + s.cached);
}

// Random token ids for a block.
inline std::vector<int32_t> block_tokens(Rng& rng, int n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.below(50000));
  return t;
}

// attention() over a cache's rows of one layer: n_q queries at the end.
inline std::vector<float> attend(const KvCache& c, int l, const std::vector<float>& q, int n_q, int gqa, int threads) {
  AttentionArgs a;
  a.q = q.data();
  a.n_q = n_q;
  a.n_q_heads = c.n_kv_heads() * gqa;
  a.n_kv = c.n_tokens();
  a.n_kv_heads = c.n_kv_heads();
  a.d = c.head_dim();
  a.k = c.k_rows(l);
  a.v = c.v_rows(l);
  a.causal_offset = c.n_tokens() - n_q;
  a.mu_k = c.mu_k(l);
  a.mu_v = c.mu_v(l);
  a.threads = threads;
  std::vector<float> out(size_t(n_q) * a.n_q_heads * a.d, 0.0f);
  a.out = out.data();
  EXPECT_TRUE(attention(a).ok());
  return out;
}

}  // namespace paged_test
}  // namespace tkv
