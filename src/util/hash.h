// FNV-1a over bytes: binds files (KL bases, KV policies) to their model and
// data, and checksums them. Not cryptographic.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tkv {

inline uint64_t fnv1a(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace tkv
