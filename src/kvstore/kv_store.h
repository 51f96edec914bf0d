// kvstore/: the shared KV block store (Redis through hiredis) that server
// replicas read and write compressed blocks in. It sees util/, codec/, attention/ and cache/; never model/ or server/.
//
// KvStore is a client that can never fail its caller: every operation is
// bounded (a lookup by its deadline, a write by a bounded queue drained by
// one writer thread) and a store that is down, slow, full or returning
// garbage only costs hits. Connections are made lazily and re-made with
// exponential backoff (100 ms to 5 s) after any error; a reply that is not a
// bulk string counts as an error, never as a value. Values are opaque bytes
// here: their framing and verification are block_value.h's.
//
// Built without hiredis (pkg-config hiredis not found), open() fails with
// the reason and the server refuses --kv-store.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "util/status.h"

namespace tkv::kvstore {

// redis://[:PASSWORD@]HOST:PORT[/DB] (also redis://[USER:PASSWORD@]...;
// the user is passed to AUTH when given).
struct StoreUrl {
  std::string host, user, password;
  int port = 6379, db = 0;
};
Expected<StoreUrl> parse_store_url(const std::string& url);
// The URL with its password replaced by "***" (logs, /health).
std::string redact_store_url(const std::string& url);

struct KvStoreOptions {
  std::string url;
  std::string prefix = "turbokv";  // keys are PREFIX:kv:HEX
  int ttl_seconds = 0;             // 0: no expiry (redis.conf's maxmemory policy evicts)
  int lookup_deadline_ms = 1000;   // one lookup's whole round trip, connection included
  int connect_timeout_ms = 500;
  int queue_blocks = 64;           // writes waiting for the writer; more are dropped
  size_t queue_bytes = size_t(256) << 20;
  int read_connections = 4;        // concurrent lookups; more wait for one
};

struct KvStoreStats {
  int64_t lookups = 0;        // lookup round trips
  int64_t hits = 0, misses = 0;  // keys found / not found (or not fetched: store down, past the deadline)
  int64_t blocks_read = 0, bytes_read = 0;  // values returned (before verification)
  int64_t blocks_written = 0, bytes_written = 0;
  int64_t errors = 0;          // failed connections, commands, deadlines
  int64_t dropped_writes = 0;  // writes refused by a full queue or lost to an error
  int64_t invalid_values = 0;  // counted by the caller (block_value.h verification)
  int64_t duplicate_writes = 0;  // writes skipped: this process wrote the key recently
  double lookup_seconds = 0;   // total time of lookups
  double lookup_seconds_max = 0;
  int queued = 0;              // writes waiting now
  bool connected = false;      // the last operation reached the store
};

class KvStore {
 public:
  // Checks the URL and starts the writer; does not need the store to be up
  // (the first operations connect, or count errors and back off).
  static Expected<std::unique_ptr<KvStore>> open(const KvStoreOptions& o);
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // The full key of a content hash (PREFIX:kv:16 hex digits).
  std::string key(uint64_t hash) const;
  // One pipelined round trip of GETs within the deadline; values[i] empty
  // when the key is missing or the lookup failed (then every later value is
  // empty too). Never throws, never blocks past the deadline (plus a
  // connect timeout bounded by it).
  std::vector<std::string> get(const std::vector<std::string>& keys);
  // Queues SET key value [EX ttl]; false when dropped (queue full) or skipped
  // (this process wrote the key recently). Never blocks on the store.
  bool put(std::string key, std::string value);
  // True when the queue has room for `bytes` more (a caller can skip
  // building a value that would be dropped).
  bool has_room(size_t bytes) const;
  // Waits until the queue is empty or ms pass (tests, shutdown).
  void flush(int ms);
  void count_invalid() { invalid_.fetch_add(1); }
  // The largest value a lookup accepts (a longer one is an error, never
  // allocated): the caller's largest block value.
  void set_max_value_bytes(size_t n) { max_value_.store(n); }
  // A write the caller did not even queue (has_room() said no).
  void count_dropped();
  KvStoreStats stats() const;
  // "connected", "disconnected" (with the last error) for /health.
  std::string state() const;
  const KvStoreOptions& options() const { return opt_; }

  struct Conn;  // one hiredis connection (kv_store_redis.cpp)

 private:
  KvStore() = default;
  void writer();
  std::unique_ptr<Conn> take_read_conn(int64_t deadline_us);
  void give_read_conn(std::unique_ptr<Conn> c);
  std::unique_ptr<Conn> connect(int timeout_ms);
  bool backing_off() const;
  void failed(const std::string& why);
  void succeeded();

  KvStoreOptions opt_;
  StoreUrl url_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_, conn_cv_;
  struct Item {
    std::string key, value;
  };
  std::deque<Item> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stop_ = false;
  std::thread writer_;
  std::vector<std::unique_ptr<Conn>> idle_conns_;
  int open_conns_ = 0;
  std::unordered_set<std::string> written_;  // keys written recently (bounded; cleared on reconnect)
  KvStoreStats s_;
  std::atomic<int64_t> invalid_{0};
  std::atomic<size_t> max_value_{size_t(1) << 30};
  std::string last_error_;
  int64_t retry_at_us_ = 0;  // no connection attempt before (backoff)
  int backoff_ms_ = 0;
};

}  // namespace tkv::kvstore
