// libFuzzer harness for the KV file reader (eval/kv_file.h, the files of
// `kv-dump` and ../shared/data/kv): header checks against the input's size,
// then the rows quantized as kv-stats would (q8_0 and tq4, which reject NaN
// and Inf rows with an error). Seeds in fuzz/corpus/kv_file/.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/format.h"
#include "eval/kv_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto kv = tkv::parse_kv_file("fuzz.kv", data, size);
  if (!kv) return 0;
  if (kv->data.size() != kv->values()) __builtin_trap();
  // Codecs exist for head dims 8..1024; building one for a new d over 64
  // costs its codebook (seconds), so the fuzzer uses the small ones.
  if (kv->head_dim < 8 || kv->head_dim > 64) return 0;
  for (const char* name : {"q8_0", "tq4"}) {
    auto c = tkv::make_codec(name, int(kv->head_dim));
    if (!c) __builtin_trap();
    std::vector<uint8_t> out((*c)->row_bytes());
    std::vector<float> back(kv->head_dim);
    for (uint32_t h = 0; h < kv->kv_heads; ++h)
      for (uint32_t t = 0; t < kv->tokens; ++t)
        if ((*c)->quantize(kv->head(h) + size_t(t) * kv->head_dim, 1, out.data()).ok())
          (*c)->dequantize(out.data(), 1, back.data());
  }
  return 0;
}
