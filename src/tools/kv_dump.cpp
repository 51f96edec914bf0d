#include "tools/kv_dump.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "cache/kv_cache.h"
#include "eval/kv_file.h"

namespace tkv {

Status kv_dump(const Model& model, const std::string& text, const std::vector<int>& layers, int max_tokens,
               const std::string& dir, int threads, const std::function<void(int, int)>& progress) {
  const ModelConfig& c = model.config();
  for (int l : layers)
    if (l < 0 || l >= c.kv_shape().n_layer)
      return Status::Error("kv-dump: layer " + std::to_string(l) + " does not exist (the model has " +
                           std::to_string(c.kv_shape().n_layer) + " layers with a KV cache)");
  std::vector<int32_t> toks = model.tokenizer().encode(text, true);
  if (static_cast<int>(toks.size()) > max_tokens) toks.resize(max_tokens);
  if (toks.empty()) return Status::Error("kv-dump: the text has no tokens");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error("kv-dump: cannot create " + dir + ": " + ec.message());
  const int T = static_cast<int>(toks.size()), H = c.n_head_kv, d = c.head_dim;
  std::map<int, KvFile> keys, values;
  for (int l : layers)
    for (auto* m : {&keys, &values}) {
      KvFile& f = (*m)[l];
      f.layer = l;
      f.kv_heads = H;
      f.tokens = T;
      f.head_dim = d;
      f.data.assign(size_t(H) * T * d, 0.0f);
    }
  KvCacheOptions co;
  co.type_k = co.type_v = "f32";  // the observer sees the rows before any coding anyway
  co.capacity = T;
  auto cache = KvCache::create(c.kv_shape(), co);
  if (!cache) return cache.status();
  std::vector<float> logits(c.n_vocab);
  auto observe = [&](int layer, int pos, int n, const float* k, const float* v) {
    auto it = keys.find(layer);
    if (it == keys.end()) return;
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < d; ++i) {
          it->second.head(h)[size_t(pos + t) * d + i] = k[(size_t(t) * H + h) * d + i];
          values[layer].head(h)[size_t(pos + t) * d + i] = v[(size_t(t) * H + h) * d + i];
        }
  };
  Status s;
  for (int done = 0; done < T;) {  // batches of 512 tokens, like perplexity
    const int b = std::min(512, T - done);
    s = model.forward(toks.data() + done, b, done, **cache, threads, logits.data(), false, observe);
    if (!s.ok()) return s;
    done += b;
    if (progress) progress(done, T);
  }
  for (int l : layers) {
    s = write_kv_file(dir + "/layer" + std::to_string(l) + "_keys.bin", keys[l]);
    if (!s.ok()) return s;
    s = write_kv_file(dir + "/layer" + std::to_string(l) + "_values.bin", values[l]);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace tkv
