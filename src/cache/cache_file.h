// Cache files: a KV cache saved as it is held (no re-encoding: a tq4 cache
// saves tq4 bytes, a staging layer its f16 rows) with the token ids it holds,
// bound to its model, formats, seeds, policy and mean-centring state, every
// section checksummed with xxHash64 (layout: docs/FORMATS.md §4d).
//
// Writing is crash-safe (util/atomic_file.h). Reading validates the header
// against what the caller's cache would be (model, shape, formats, seeds,
// policy, means), the file's size against the header, and every section's
// checksum, before a loaded cache is handed out: a caller never sees a
// half-loaded cache, and no allocation is sized by an unchecked field.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "util/status.h"

namespace tkv {

// Where the bytes of a cache file come from: a file (pread) or memory (the
// fuzz harness, tests).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Exactly n bytes at offset, or an error.
  virtual Status read(uint64_t offset, void* dst, size_t n) const = 0;
};
Expected<std::unique_ptr<ByteSource>> open_file_source(const std::string& path);
// A source over an open file descriptor of `size` bytes, which it owns (closes).
std::unique_ptr<ByteSource> open_fd_source(int fd, uint64_t size);
std::unique_ptr<ByteSource> memory_source(const void* data, size_t n);

// Layer state in a cache file.
enum class CacheLayerState : uint8_t { kPlain = 0, kStaging = 1, kCentred = 2 };

struct CacheFileHeader {
  uint32_t version = 0;
  uint64_t model = 0;   // Model::fingerprint()
  uint64_t policy = 0;  // KvPolicy::fingerprint(), 0 without a policy
  uint64_t seed = 0;    // codec seed (V uses seed ^ 0x5555555555555555)
  int n_layer = 0, n_kv_heads = 0, head_dim = 0, n_tokens = 0;
  int mean_rows = 0;    // rows that fix the means (KvCache::mean_rows()), 0 = none
  std::vector<std::string> type_k, type_v;  // per layer
  std::vector<CacheLayerState> state;       // per layer
  uint64_t header_bytes = 0;                // magic through the header checksum
  std::vector<uint64_t> section_bytes;      // payload bytes: tokens, then each layer
  uint64_t file_bytes = 0;                  // what the header describes
  uint64_t row_payload_bytes = 0;           // K and V rows only (what the cache holds)
};

// Saves the cache's n_tokens() rows of every layer and `tokens` (their ids,
// one per stored token) for the model with fingerprint `model`.
struct CacheSaveOptions {
  uint64_t fail_after_bytes = UINT64_MAX;  // fault injection for tests (see AtomicWriter)
};
Status save_cache_file(const std::string& path, const KvCache& cache, uint64_t model,
                       const std::vector<int32_t>& tokens, const CacheSaveOptions& opt = {});

// The header alone (magic, version, checksum, bounds), e.g. for `cache info`.
Expected<CacheFileHeader> read_cache_header(const ByteSource& src);

// Reads every section and checks its checksum (and, where the formats are
// known without a calibration, its size), without a model.
Status verify_cache_file(const ByteSource& src, CacheFileHeader* header = nullptr);

struct LoadedCache {
  std::unique_ptr<KvCache> cache;
  std::vector<int32_t> tokens;
};
// Builds a cache with options `co` (capacity at least the file's tokens) for
// a model of the given cache shape with fingerprint `model` and
// vocabulary n_vocab, and fills it from the file. Any mismatch (another
// model, format, seed, policy, mean centring) or damage is an error naming
// it; the cache is returned only when everything checked out.
Expected<LoadedCache> load_cache_file(const ByteSource& src, const KvShape& shape, const KvCacheOptions& co,
                                      uint64_t model, int n_vocab);
// The same into a new sequence of a shared pool (a server's slot restore):
// the file must match the pool's layout; its blocks come from the pool.
Expected<LoadedCache> load_cache_file_into(const ByteSource& src, const std::shared_ptr<BlockPool>& pool, int capacity,
                                           uint64_t model, int n_vocab);
Expected<LoadedCache> load_cache_file(const std::string& path, const KvShape& shape, const KvCacheOptions& co,
                                      uint64_t model, int n_vocab);

}  // namespace tkv
