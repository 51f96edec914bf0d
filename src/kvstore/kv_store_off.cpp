// KvStore without hiredis (kv_store.h): open() says why; nothing else runs.
#include "kvstore/kv_store.h"

namespace tkv::kvstore {

struct KvStore::Conn {};

Expected<std::unique_ptr<KvStore>> KvStore::open(const KvStoreOptions& o) {
  if (auto u = parse_store_url(o.url); !u) return u.status();
  return Status::Error("--kv-store: this turbokv was built without hiredis (install libhiredis-dev, "
                       "scripts/install-deps.sh, and rebuild)");
}
KvStore::~KvStore() = default;
std::string KvStore::key(uint64_t) const { return {}; }
std::vector<std::string> KvStore::get(const std::vector<std::string>& keys) { return std::vector<std::string>(keys.size()); }
bool KvStore::put(std::string, std::string) { return false; }
bool KvStore::has_room(size_t) const { return false; }
void KvStore::flush(int) {}
void KvStore::count_dropped() {}
KvStoreStats KvStore::stats() const { return s_; }
std::string KvStore::state() const { return "off"; }

}  // namespace tkv::kvstore
