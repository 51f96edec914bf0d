#include "model/prompt_cache.h"

#include <algorithm>

#include <sys/stat.h>

namespace tkv {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

Status prefill(const Model& m, const int32_t* tokens, int n, int pos, KvCache& cache, int threads, int batch,
               float* logits, const std::function<void(int, int)>& progress) {
  if (batch < 1) return Status::Error("prefill: batch must be at least 1 token");
  for (int done = 0; done < n;) {
    const int b = std::min(batch, n - done);
    if (Status s = m.forward(tokens + done, b, pos + done, cache, threads, logits); !s.ok()) return s;
    done += b;
    if (progress) progress(done, n);
  }
  return Status::Ok();
}

Expected<PromptCache> open_prompt_cache(const std::string& path, const Model& m, const KvCacheOptions& co,
                                        const std::vector<int32_t>& prompt) {
  const ModelConfig& c = m.config();
  PromptCache pc;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    pc.note = "no file yet";
  } else {
    auto loaded = load_cache_file(path, c.kv_shape(), co, m.fingerprint(), c.n_vocab);
    if (!loaded) {
      pc.note = loaded.error();
    } else {
      const size_t common = common_prefix(loaded->tokens, prompt);
      const int want = static_cast<int>(std::min(common, prompt.empty() ? 0 : prompt.size() - 1));
      const int keep = loaded->cache->keepable_prefix(want);
      if (Status s = loaded->cache->truncate(keep); !s.ok()) return s;
      pc.cache = std::move(loaded->cache);
      pc.reused = keep;
      if (keep < want)
        pc.note = "only a prefix of " + std::to_string(want) + " tokens matched, fewer than the " +
                  std::to_string(pc.cache->mean_rows()) + " rows its means were fixed from";
      if (pc.reused == 0) pc.cache.reset();
    }
  }
  if (!pc.cache) {
    auto fresh = KvCache::create(c.kv_shape(), co);
    if (!fresh) return fresh.status();
    pc.cache = std::move(*fresh);
    pc.reused = 0;
  }
  return pc;
}

}  // namespace tkv
