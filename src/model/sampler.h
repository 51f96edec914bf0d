// Token sampling: greedy (temperature 0), or temperature with top-k, top-p,
// min-p and a repetition penalty, from a seeded generator (reproducible).
#pragma once
#include <cstdint>
#include <vector>

#include "util/rng.h"

namespace tkv {

struct SamplerOptions {
  float temperature = 0.8f;  // 0 = greedy
  int top_k = 40;            // 0 = off
  float top_p = 0.95f;       // 1 = off
  float min_p = 0.05f;       // 0 = off
  float repeat_penalty = 1.0f;  // 1 = off (llama.cpp's: divide positive logits, multiply negative)
  int repeat_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}
  // Picks the next token from logits (n_vocab); `history` is what came before.
  int32_t sample(const float* logits, int n_vocab, const std::vector<int32_t>& history);

 private:
  SamplerOptions o_;
  Rng rng_;
};

}  // namespace tkv
