// libFuzzer harness for the KV policy reader (cache/kv_policy.h): header,
// per-layer formats, calibrations, and building each format's codec on what
// was read. The fuzz build reads past the checksum (see fuzz_cache_file.cpp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cache/kv_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A codec for a new head dim over 256 takes seconds to build (see
  // fuzz_cache_file.cpp); the bound itself is a unit test.
  if (size >= 32) {
    uint32_t d;
    std::memcpy(&d, data + 28, 4);
    if (d > 256) return 0;
  }
  auto p = tkv::parse_kv_policy(std::string(reinterpret_cast<const char*>(data), size));
  if (p) (void)p->fingerprint();
  return 0;
}
