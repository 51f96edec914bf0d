// The KV vector file (shared/README.md, data/kv/): a 20-byte header of five
// little-endian uint32 (magic 0x544B5651 "QVKT", layer, kv_heads, tokens,
// head_dim), then float32 little-endian values laid out [head][token][dim].
// kv-stats reads it and writes it back (--roundtrip); tests write their own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace tkv {

constexpr uint32_t kKvFileMagic = 0x544B5651;
constexpr size_t kKvFileHeaderBytes = 20;
// Limits that reject headers that are garbage rather than a real model's cache.
constexpr uint32_t kKvFileMaxHeadDim = 65536;
constexpr uint32_t kKvFileMaxHeads = 65536;

struct KvFile {
  uint32_t layer = 0;
  uint32_t kv_heads = 0;
  uint32_t tokens = 0;
  uint32_t head_dim = 0;
  std::vector<float> data;  // kv_heads * tokens * head_dim, [head][token][dim]

  size_t values() const { return size_t{kv_heads} * tokens * head_dim; }
  // The tokens x head_dim rows of one KV head, contiguous.
  const float* head(uint32_t h) const { return data.data() + size_t{h} * tokens * head_dim; }
  float* head(uint32_t h) { return data.data() + size_t{h} * tokens * head_dim; }
};

// Validates the magic, every dimension (non-zero, not absurd) and that the file
// length is exactly header + values; errors name the file, the field and what
// was expected. NaN and Inf values load: the codec reports them by row.
Expected<KvFile> read_kv_file(const std::string& path);
// The same checks on a file held in memory (`name` stands for the path).
Expected<KvFile> parse_kv_file(const std::string& name, const uint8_t* data, size_t size);
// Fails if data.size() does not match the dimensions or the write fails.
Status write_kv_file(const std::string& path, const KvFile& kv);

}  // namespace tkv
