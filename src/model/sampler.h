// Token sampling: greedy (temperature 0), or temperature with top-k, top-p,
// min-p, a repetition penalty and OpenAI's presence/frequency penalties, from a
// seeded generator (reproducible).
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
  // OpenAI's: logit[t] -= frequency_penalty * count(t) + presence_penalty * (count(t) > 0),
  // counted over history[penalty_from..] (the generated tokens). 0 = off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}
  // Picks the next token from logits (n_vocab); `history` is what came before.
  // The presence/frequency penalties count history[penalty_from..] only, so a
  // caller passing prompt + generated tokens gives the prompt length (OpenAI
  // counts the completion's tokens, not the prompt's).
  int32_t sample(const float* logits, int n_vocab, const std::vector<int32_t>& history,
                 size_t penalty_from = 0);

 private:
  SamplerOptions o_;
  Rng rng_;
};

// Subtracts OpenAI's presence/frequency penalties from logits in place, counting
// tokens[from..]; ids outside [0, n_vocab) are ignored. Exposed for tests.
void apply_presence_frequency(float* logits, int n_vocab, const std::vector<int32_t>& tokens, size_t from,
                              float presence_penalty, float frequency_penalty);

}  // namespace tkv
