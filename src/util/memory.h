// How much memory this process can still take: checked before any large
// allocation that is sized by input (a context length, a KV budget), so that
// a request that cannot fit is an error naming the numbers, not an attempt
// that the kernel's overcommit lets through until the pages are touched.
#pragma once
#include <cstdint>
#include <string>

namespace tkv {

// MemAvailable from /proc/meminfo (free plus reclaimable page cache), or
// free pages where that is missing, and no more than the cgroup (v2) leaves. TKV_AVAILABLE_MEMORY=BYTES overrides it
// (tests of the limit, or to allow overcommit deliberately).
uint64_t available_memory();

// "12.3 GiB", "512.0 MiB": for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace tkv
