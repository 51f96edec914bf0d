// Batched steps (Model::forward_batch): a sequence's logits and cache rows are
// bit for bit what it gets alone, whatever else shares the step.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include <unistd.h>
#include <memory>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/kv_cache.h"
#include "model/gen_model.h"
#include "model/model.h"
#include "util/rng.h"
#include "test_models.h"

namespace tkv {
namespace {

const std::string kRef = std::string(TKV_SHARED_DIR) + "/models/ref-5m/ref-5m-f32.gguf";

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n_vocab));
  return t;
}

// Three sequences: two decode and one prompt chunk per step, in a shared
// pool, against each run alone in its own cache with the same chunks.
void check_batch_matches_alone(const Model& m, const std::string& fmt) {
  const ModelConfig& c = m.config();
  KvCacheOptions co;
  co.type_k = co.type_v = fmt;
  co.capacity = 512;
  auto layout = KvLayout::create(c.kv_shape(), co);
  ASSERT_TRUE(layout.ok()) << layout.error();
  auto pool = BlockPool::create(*layout, 16, 3 * 512 / 16);
  ASSERT_TRUE(pool.ok()) << pool.error();
  // Each sequence: a prompt evaluated in chunks, then decode tokens.
  struct Plan { std::vector<int32_t> tokens; std::vector<int> chunks; };
  std::vector<Plan> plans = {{{}, {70, 20, 1, 1, 1, 1, 1, 1}}, {{}, {5, 30, 1, 1, 1, 1, 1, 1}},
                              {{}, {1, 1, 1, 64, 77, 1, 1, 1, 1}}};
  for (size_t s = 0; s < plans.size(); ++s) {
    int total = 0;
    for (int n : plans[s].chunks) total += n;
    plans[s].tokens = random_tokens(total, c.n_vocab, s + 1);
  }
  // Alone: each in a private cache.
  std::vector<std::vector<std::vector<float>>> alone(plans.size());
  std::vector<std::unique_ptr<KvCache>> solo;
  for (size_t s = 0; s < plans.size(); ++s) {
    auto cache = KvCache::create(c.kv_shape(), co);
    ASSERT_TRUE(cache.ok()) << cache.error();
    int pos = 0;
    for (int n : plans[s].chunks) {
      std::vector<float> lg(c.n_vocab);
      ASSERT_TRUE(m.forward(plans[s].tokens.data() + pos, n, pos, **cache, 2, lg.data()).ok());
      alone[s].push_back(lg);
      pos += n;
    }
    solo.push_back(std::move(*cache));
  }
  // Batched: step k runs chunk k of every sequence that still has one.
  std::vector<std::unique_ptr<KvCache>> seqs;
  for (size_t s = 0; s < plans.size(); ++s) {
    auto cache = KvCache::create_in(*pool, 512);
    ASSERT_TRUE(cache.ok()) << cache.error();
    seqs.push_back(std::move(*cache));
  }
  std::vector<int> pos(plans.size(), 0);
  for (size_t step = 0; step < 9; ++step) {
    std::vector<Model::BatchSeq> batch;
    std::vector<std::vector<float>> lg(plans.size(), std::vector<float>(c.n_vocab));
    std::vector<size_t> who;
    for (size_t s = 0; s < plans.size(); ++s) {
      if (step >= plans[s].chunks.size()) continue;
      const int n = plans[s].chunks[step];
      batch.push_back({seqs[s].get(), plans[s].tokens.data() + pos[s], n, pos[s], lg[s].data()});
      who.push_back(s);
    }
    ASSERT_TRUE(m.forward_batch(batch, 2).ok());
    for (size_t s : who) {
      EXPECT_EQ(0, std::memcmp(lg[s].data(), alone[s][step].data(), 4 * c.n_vocab))
          << fmt << " sequence " << s << " step " << step;
      pos[s] += plans[s].chunks[step];
    }
  }
  // The rows too, every layer and head.
  for (size_t s = 0; s < plans.size(); ++s)
    for (int l = 0; l < seqs[s]->n_layer(); ++l)
      for (int t = 0; t < pos[s]; t += 7)
        for (int h = 0; h < c.n_head_kv; ++h) {
          const size_t rb = seqs[s]->layout().layer(l).k_row;
          EXPECT_EQ(0, std::memcmp(seqs[s]->k_row(l, t, h), solo[s]->k_row(l, t, h), rb))
              << fmt << " sequence " << s << " layer " << l << " token " << t;
        }
}

TEST(Batch, StepsGiveEachSequenceItsBitsAlone) {
  auto m = Model::load(kRef);
  ASSERT_TRUE(m.ok()) << m.error();
  for (const char* fmt : {"tq4", "q8_0", "f16"}) check_batch_matches_alone(**m, fmt);
}

// A mixture of experts: the decode group's tokens reach different experts,
// each expert's tokens go through matmul_tokens, so a token's bits still do
// not depend on which others share the step (Q8_0 experts: the int8 decode
// kernel; Q4_K: the row core).
TEST(Batch, MixtureOfExpertsStepsGiveEachSequenceItsBitsAlone) {
  for (const char* type : {"Q8_0", "Q4_K"}) {
    GenModelOptions g = random_model_options("qwen3moe", type, 256);
    g.experts = 8;
    g.experts_used = 2;
    const std::string path = testing::TempDir() + std::to_string(getpid()) + "_tkv_batch_moe.gguf";
    ASSERT_TRUE(generate_model(g, nullptr, path).ok());
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error();
    check_batch_matches_alone(**m, "tq4");
    std::remove(path.c_str());
  }
}

// Sliding-window layers (their rings wrap; prompts of 70 and 77 tokens go
// through in steps) and Gated DeltaNet layers (each sequence's recurrent
// state): still each sequence's bits alone.
TEST(Batch, WindowAndRecurrentStepsGiveEachSequenceItsBitsAlone) {
  for (const char* arch : {"gemma3", "qwen35"}) {
    GenModelOptions g;
    g.arch = arch;
    g.type = "Q8_0";
    g.layers = 4;
    g.dim = 64;
    g.heads = 4;
    g.kv_heads = 2;
    g.head_dim = 32;
    g.ffn = 64;
    g.window = 16;
    g.ssm_state = 16;
    const std::string path = testing::TempDir() + std::to_string(getpid()) + "_tkv_batch_" + arch + ".gguf";
    ASSERT_TRUE(generate_model(g, nullptr, path).ok());
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error();
    check_batch_matches_alone(**m, "tq4");
    std::remove(path.c_str());
  }
}

TEST(Batch, BadBatchesAreErrors) {
  auto m = Model::load(kRef);
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_FALSE((*m)->forward_batch({}, 1).ok());
  auto cache = KvCache::create((*m)->config().kv_shape(), {});
  ASSERT_TRUE(cache.ok());
  const int32_t bad = (*m)->config().n_vocab;
  const Status s = (*m)->forward_batch({{cache->get(), &bad, 1, 0, nullptr}}, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tkv
