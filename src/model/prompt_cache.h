// A prompt's KV state kept in a cache file (llama.cpp's --prompt-cache):
// open_prompt_cache() loads the file when it matches the model and cache
// options and keeps the longest common token prefix with the new prompt;
// only the rest of the prompt is then evaluated.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/cache_file.h"
#include "cache/kv_cache.h"
#include "model/model.h"
#include "util/status.h"

namespace tkv {

struct PromptCache {
  std::unique_ptr<KvCache> cache;  // holds prompt[0, reused)
  int reused = 0;
  // Why the file was not used (missing, another model or format, damaged);
  // empty when it was.
  std::string note;
};

// At most prompt.size() - 1 tokens are reused, so the last prompt token is
// always evaluated (its logits start generation), and never a prefix shorter
// than the rows the cache's means were fixed from (KvCache::keepable_prefix).
// Fails only when a fresh cache with options co cannot be made.
Expected<PromptCache> open_prompt_cache(const std::string& path, const Model& m, const KvCacheOptions& co,
                                        const std::vector<int32_t>& prompt);

// Evaluates tokens [0, n) at positions pos.. in batches of `batch` tokens;
// logits of the last token go to `logits`. progress(done, n) is called after
// each batch. (A batch boundary inside the first mean_tokens rows changes
// what attention reads there, f16 staging rows instead of coded ones, so
// batching is part of what a result depends on, as in llama.cpp.)
Status prefill(const Model& m, const int32_t* tokens, int n, int pos, KvCache& cache, int threads, int batch,
               float* logits, const std::function<void(int, int)>& progress = {});

// The length of the common prefix of a and b.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace tkv
