// libFuzzer harness for the GGUF reader (gguf/gguf.h) and what is built on
// what it parsed: typed metadata lookups, the tokenizer (encode and decode),
// model construction (shapes, types, tensor sizes) and, when a model comes
// out, two tokens through it on an f16 cache (the forward pass must either
// work or fail with an error, e.g. on NaN logits). Seeds in fuzz/corpus/gguf/:
// small generated models of each architecture and weight type (gemma3's
// window layers, qwen35's Gated DeltaNet layers and shared experts too).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/tokenizer_gguf.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = tkv::gguf::File::from_memory("fuzz.gguf", data, size);
  if (!f) return 0;
  const tkv::gguf::File& g = **f;
  for (const auto& [key, v] : g.metadata()) {
    (void)g.get_string(key);
    (void)g.get_uint(key);
    (void)g.get_float(key);
  }
  auto tok = tkv::tokenizer_from_gguf(g);
  if (tok) {
    const auto ids = tok->encode("Hello <s> wor\xc3\xa9ld 12345!\n", true, true);
    (void)tok->decode(ids);
    (void)tok->decode({-1, 0, tok->n_vocab() - 1, tok->n_vocab()});
  }
  auto m = tkv::Model::from_file(*f);
  if (!m) return 0;
  const tkv::ModelConfig& c = (*m)->config();
  // Wide models would only spend the time budget in matmuls the fuzzer
  // learns nothing from (the tensors fit in the input, so this is rare).
  if (size_t(c.n_embd) * c.n_layer > (1u << 16) || c.n_ff > (1 << 14) || c.n_head > 256 ||
      c.ssm_state_floats() > (1u << 20))
    return 0;
  tkv::KvCacheOptions co;
  co.type_k = co.type_v = "f16";
  co.capacity = 4;
  auto cache = tkv::KvCache::create(c.kv_shape(), co);  // windows and recurrent state as the model needs
  if (!cache) return 0;
  std::vector<float> logits(c.n_vocab);
  const int32_t toks[2] = {0, c.n_vocab - 1};
  (void)(*m)->forward(toks, 2, 0, **cache, 1, logits.data());
  return 0;
}
