// libFuzzer harness for the cache-file reader (cache/cache_file.h): the
// header parser, the whole-file verifier, and a load into a cache built
// from the header's own description (so inputs get past the "made for
// another setup" checks to the section reads). Built with
// FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, the reader does not stop at a
// checksum mismatch, so mutated sections reach the code behind it.
// Run: make fuzz [FUZZ_SECONDS=N]; seeds in fuzz/corpus/cache_file/.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cache/cache_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Building a codec for a new head dim over 256 takes seconds (its
  // codebook): such inputs would only time out, the bound itself (8..1024)
  // is checked by the unit tests.
  if (size >= 52) {
    uint32_t d;
    std::memcpy(&d, data + 48, 4);
    if (d > 256) return 0;
  }
  auto src = tkv::memory_source(data, size);
  (void)tkv::verify_cache_file(*src);
  auto h = tkv::read_cache_header(*src);
  if (!h) return 0;
  tkv::KvCacheOptions co;
  co.layer_type_k = h->type_k;
  co.layer_type_v = h->type_v;
  co.seed = h->seed;
  co.mean_center = h->mean_rows > 0;
  if (h->mean_rows > 0) co.mean_tokens = h->mean_rows;
  co.capacity = h->n_tokens > 0 ? h->n_tokens : 1;
  auto l = tkv::load_cache_file(*src, tkv::KvShape(h->n_layer, h->n_kv_heads, h->head_dim), co, h->model, 0);
  if (l) {
    const int n = l->cache->n_tokens();
    (void)l->cache->truncate(l->cache->keepable_prefix(n / 2));
  }
  return 0;
}
