#include "util/memory.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tkv {

uint64_t available_memory() {
  if (const char* env = std::getenv("TKV_AVAILABLE_MEMORY")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0') return v;
  }
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        found = true;
        break;
      }
    std::fclose(f);
    if (found) return uint64_t(kb) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
}

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace tkv
