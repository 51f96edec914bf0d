// The serving engine beyond the reference model (issue 34): the queue limit
// (a request beyond the slots and the queue is refused with 503, never
// queued), and architectures whose sequences hold memory outside the block
// pool (gemma3's sliding-window rings, qwen35's recurrent state) with and
// without protected tokens: greedy text through the engine equals the model
// run directly, every block comes back, and a budget that cannot hold the
// slots' rings and states is refused by name.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/kv_policy.h"
#include "model/model.h"
#include "model/prompt_cache.h"
#include "server/engine.h"
#include "shared_data.h"

namespace tkv {
namespace {

using Clock = std::chrono::steady_clock;

// Waits (bounded) until `pred` holds.
template <class Pred>
bool wait_for(Pred pred, double seconds = 120) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

std::string drain(server::Task& t) {
  std::string all, piece;
  while (t.next(piece)) all += piece;
  return all;
}

std::unique_ptr<Model> load(const std::string& rel) {
  auto m = Model::load(shared_path(rel));
  EXPECT_TRUE(m.ok()) << m.error();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(EngineQueue, ARequestBeyondTheSlotsAndTheQueueIsRefusedWith503) {
  TKV_NEED_SHARED("models/ref-5m/ref-5m-f32.gguf");
  auto m = load("models/ref-5m/ref-5m-f32.gguf");
  ASSERT_TRUE(m);
  server::EngineOptions eo;
  eo.n_parallel = 1;
  eo.queue_limit = 1;
  eo.ctx = 4096;
  eo.kv_budget = size_t(64) << 20;
  KvCacheOptions co;
  auto e = server::Engine::create(*m, co, eo);
  ASSERT_TRUE(e.ok()) << e.error();
  auto request = [&] {
    server::GenRequest r;
    r.prompt = m->tokenizer().encode("The history of the city began", true);
    r.sampling.temperature = 0;
    r.max_tokens = 4000;  // long enough to hold the slot while the others arrive
    return r;
  };
  server::Engine::Refusal why{0, ""};
  auto a = (*e)->submit(request(), &why);
  ASSERT_TRUE(a);
  ASSERT_TRUE(wait_for([&] { return (*e)->metrics().running == 1; }));
  auto b = (*e)->submit(request(), &why);
  ASSERT_TRUE(b);  // waits: the queue holds one
  EXPECT_EQ((*e)->metrics().queued, 1);
  auto c = (*e)->submit(request(), &why);
  EXPECT_FALSE(c);
  EXPECT_EQ(why.status, 503);
  EXPECT_NE(why.message.find("busy"), std::string::npos) << why.message;
  EXPECT_EQ((*e)->metrics().rejected, 1);
  a->cancelled = true;
  b->cancelled = true;
  drain(*a);
  drain(*b);
  ASSERT_TRUE(wait_for([&] { return (*e)->metrics().running == 0 && (*e)->metrics().queued == 0; }));
  EXPECT_EQ((*e)->metrics().pool.in_use, 0);
}

struct FamilyCase {
  const char* file;
  const char* k;
  const char* v;
  const char* preset;  // protected tokens when set
};

// Greedy tokens of `prompt` run directly on the model: one forward for the
// prompt, then one token at a time (as the engine runs a lone request).
std::vector<int32_t> direct_greedy(const Model& m, const KvCacheOptions& co, const std::vector<int32_t>& prompt, int n) {
  auto cache = KvCache::create(m.config().kv_shape(), co);
  EXPECT_TRUE(cache.ok()) << cache.error();
  std::vector<float> logits(m.config().n_vocab);
  EXPECT_TRUE(prefill(m, prompt.data(), static_cast<int>(prompt.size()), 0, **cache, 2, 512, logits.data()).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    EXPECT_TRUE(m.forward(&next, 1, static_cast<int>(prompt.size()) + i, **cache, 2, logits.data()).ok());
  }
  return out;
}

TEST(EngineFamilies, WindowAndRecurrentModelsServeTheDirectTextAndReturnEveryBlock) {
  const FamilyCase cases[] = {
      {"models/families/gemma3.gguf", "tq4", "tq4", nullptr},
      {"models/families/gemma3.gguf", "tq2-ip", "tq2-ip", "tiny"},
      {"models/families/qwen35.gguf", "tq4", "tq4", nullptr},
      {"models/families/qwen35.gguf", "tq2-ip", "tq2-ip", "tiny"},
  };
  for (const FamilyCase& fc : cases) {
    SCOPED_TRACE(std::string(fc.file) + " " + fc.k + (fc.preset ? std::string(" preset ") + fc.preset : ""));
    TKV_NEED_SHARED(fc.file);
    auto m = load(fc.file);
    ASSERT_TRUE(m);
    KvCacheOptions co;
    co.type_k = fc.k;
    co.type_v = fc.v;
    if (fc.preset) {
      ASSERT_TRUE(apply_kv_preset(fc.preset, m->config().kv_shape().n_layer, co).ok());
    }
    server::EngineOptions eo;
    eo.n_parallel = 3;
    eo.ctx = 256;
    eo.block_tokens = 32;
    eo.kv_budget = size_t(32) << 20;
    eo.threads = 2;
    auto e = server::Engine::create(*m, co, eo);
    ASSERT_TRUE(e.ok()) << e.error();
    const char* texts[] = {"The history of the city began", "In 1912 the company moved its offices to",
                           "Once upon a time there was"};
    std::vector<std::shared_ptr<server::Task>> tasks;
    std::vector<std::vector<int32_t>> prompts;
    for (const char* t : texts) {
      server::GenRequest r;
      r.prompt = m->tokenizer().encode(t, true);
      r.sampling.temperature = 0;
      r.max_tokens = 24;
      prompts.push_back(r.prompt);
      server::Engine::Refusal why{0, ""};
      tasks.push_back((*e)->submit(r, &why));
      ASSERT_TRUE(tasks.back()) << why.message;
    }
    for (size_t i = 0; i < tasks.size(); ++i) {
      const std::string got = drain(*tasks[i]);
      EXPECT_EQ(tasks[i]->finish_reason, "length") << tasks[i]->error;
      KvCacheOptions one = co;
      one.capacity = eo.ctx;
      const std::vector<int32_t> want = direct_greedy(*m, one, prompts[i], 24);
      std::string want_text;
      for (int32_t t : want) want_text += m->tokenizer().piece(t);
      EXPECT_EQ(got, want_text) << "request " << i;
    }
    ASSERT_TRUE(wait_for([&] { return (*e)->metrics().running == 0; }));
    EXPECT_EQ((*e)->metrics().pool.in_use, 0);
    // The slots' rings and states come out of the budget first: a budget that
    // holds the rows of one context but not three slots' fixed parts is refused.
    server::EngineOptions tight = eo;
    tight.kv_budget = 4096;
    auto refused = server::Engine::create(*m, co, tight);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().find("rings and recurrent state"), std::string::npos) << refused.error();
  }
}

}  // namespace
}  // namespace tkv
