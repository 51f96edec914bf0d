#include "util/memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tkv {

namespace {

// One unsigned number from a file, or false ("max" and missing files too).
bool read_number(const char* path, unsigned long long& v) {
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  const bool ok = std::fscanf(f, "%llu", &v) == 1;
  std::fclose(f);
  return ok;
}

}  // namespace

uint64_t available_memory() {
  if (const char* env = std::getenv("TKV_AVAILABLE_MEMORY")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0') return v;
  }
  // Inside a container the cgroup's limit binds first (v2: memory.max less
  // memory.current; "max" reads as no limit).
  uint64_t cgroup = UINT64_MAX;
  unsigned long long limit = 0, used = 0;
  if (read_number("/sys/fs/cgroup/memory.max", limit) && read_number("/sys/fs/cgroup/memory.current", used))
    cgroup = limit > used ? limit - used : 0;
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
    if (found) return std::min<uint64_t>(uint64_t(kb) * 1024, cgroup);
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return std::min<uint64_t>(pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX, cgroup);
}

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace tkv
