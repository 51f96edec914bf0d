// eval/: measuring models and caches — perplexity, KL divergence, calibration,
// needle in a haystack, KV statistics, reports. It sees model/ and below.
//
// Perplexity by llama-perplexity's method, and KL divergence against a saved
// base run: the text is split into chunks of n_ctx tokens, BOS replaces the
// first token of each chunk, and only the second half of each chunk is scored.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/model.h"
#include "util/status.h"

namespace tkv {

struct PerplexityOptions {
  int n_ctx = 512;
  int max_chunks = 0;   // 0 = all
  int batch = 512;      // tokens per forward call
  int threads = 2;
  KvCacheOptions cache;
  std::string kl_base;  // file of base log-probabilities
  bool kl_write = false;  // true: write kl_base; false with kl_base: compare with it
};

struct KlStats {
  double mean = 0, mean_err = 0, max = 0, min = 0, median = 0;
  double p999 = 0, p99 = 0, p95 = 0, p90 = 0, p10 = 0, p05 = 0, p01 = 0, p001 = 0;
  double dp_mean = 0, dp_err = 0, dp_rms = 0;  // change in the correct token's probability
  double same_top = 0;                         // % of positions with the same argmax
};

struct PerplexityResult {
  double ppl = 0, ppl_err = 0;
  int chunks = 0;
  int64_t scored = 0;
  std::vector<double> running;  // PPL after each chunk
  bool has_kl = false;
  KlStats kl;
};

// CRLF -> LF (WikiText-2 ships with Windows line endings).
std::string normalize_newlines(std::string text);

// `progress(i, chunks, ppl)` is called after chunk i of `chunks` (PPL so far).
Expected<PerplexityResult> perplexity(const Model& model, const std::string& text, const PerplexityOptions& o,
                                      const std::function<void(int, int, double)>& progress = {});

}  // namespace tkv
