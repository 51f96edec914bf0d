// server/: the serving engine (slots, admission, batched steps) and the
// OpenAI-compatible HTTP server. It sees everything up to eval/ and text/;
// tools/, capi/ and python/ never come in.
//
// The serving engine behind `turbokv serve`: many sequences in one KV block
// pool (cache/block_pool.h) within a memory budget, run together in batched
// steps (Model::forward_batch) by one scheduler thread.
//
// A request is admitted, first come first served, when a slot is free and the
// blocks for its prompt and max_tokens (capped by the context) can be taken;
// otherwise it waits in a bounded queue. Its prompt first shares the longest
// run of cached full blocks (prefix cache), then the rest is evaluated in
// chunks of n_batch tokens from that block boundary; then one token per step.
// Chunks are never split by the per-step budget, so a sequence's arithmetic
// is the same whatever shares its steps: its greedy output equals a lone run
// (`turbokv run`, same -b) token for token.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/block_pool.h"
#include "cache/kv_cache.h"
#include "kvstore/block_value.h"
#include "kvstore/kv_store.h"
#include "model/model.h"
#include "model/sampler.h"
#include "text/chat_template.h"
#include "text/text_stream.h"
#include "util/status.h"

namespace tkv::server {

struct EngineOptions {
  int n_parallel = 4;      // slots: sequences running at once
  int ctx = 4096;          // tokens per sequence (prompt + generated)
  int n_batch = 512;       // prompt chunk (tokens per forward), as run -b
  int step_tokens = 1024;  // tokens per step (decode tokens + whole prompt chunks; at least one chunk)
  int threads = 1;
  int queue_limit = 64;    // waiting requests beyond the slots; more are refused
  int block_tokens = 256;
  size_t kv_budget = 0;    // bytes for the block pool
  bool keep_slot_cache = false;  // an idle slot keeps its last sequence (for /slots save)
  // The shared block store (kvstore/), or null: full blocks are written
  // behind (a bounded queue, never waited on), and a request's prompt reads
  // the blocks after the local prefix cache's from it before it is queued
  // (one round trip within the store's deadline, verified).
  std::shared_ptr<kvstore::KvStore> store;
};

struct GenRequest {
  std::vector<int32_t> prompt;
  SamplerOptions sampling;
  int max_tokens = -1;  // -1: until the context is full
  std::vector<std::string> stop;
  std::vector<int32_t> end_tokens;  // end of generation (EOS, end of turn): not part of the text
  // Harmony (gpt-oss) replies: only the final channel's text reaches the
  // client (HarmonyFilter, before stop strings are looked for).
  bool harmony = false;
  HarmonyFilter::Ids harmony_ids;
  int slot = -1;                    // a slot asked for (-1: any)
};

// A request in flight. The engine appends text as it is generated; the HTTP
// side waits on it, and sets `cancelled` when its client has gone.
struct Task {
  GenRequest req;
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // text not yet taken by the reader
  bool done = false;
  std::string finish_reason;  // "stop", "length", or "error"
  std::string error;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::atomic<bool> cancelled{false};
  // Blocks of the prompt read from the shared store at submit(), verified:
  // blocks store_first, store_first + 1, ... (adopted at admission when the
  // local prefix cache ends where they start).
  struct StoredBlock {
    std::string value;
    kvstore::DecodedBlock block;  // points into value
  };
  int store_first = 0;
  std::vector<StoredBlock> stored;
  // Waits for text or the end; returns false once done and drained.
  bool next(std::string& text);
  // The same, waiting at most ms: kText (text may be empty only at the end),
  // kEnd once done and drained, kTimeout when nothing came.
  enum class Next { kText, kEnd, kTimeout };
  Next next_for(std::string& text, int ms);
  bool done_now();
};

struct SlotInfo {
  int id = 0;
  bool processing = false;
  int n_ctx = 0, n_prompt = 0, n_cached = 0, n_decoded = 0, n_tokens = 0;
};

struct EngineMetrics {
  int running = 0, queued = 0;
  int peak_running = 0;  // the most sequences that ran at once
  int64_t requests = 0, rejected = 0, cancelled = 0;
  int64_t prompt_tokens = 0, prompt_evaluated = 0, generated = 0, prefix_hit_tokens = 0;
  double prompt_seconds = 0, gen_seconds = 0;
  BlockPoolStats pool;
  // The shared store: prompt tokens and blocks taken from it at admission.
  bool has_store = false;
  int64_t store_hit_tokens = 0, store_blocks_adopted = 0;
  kvstore::KvStoreStats store;
  std::string store_state;
  size_t block_bytes = 0, budget = 0;
  int64_t idle_slot_blocks = 0;
};

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> create(const Model& model, const KvCacheOptions& co,
                                                  const EngineOptions& opt);
  ~Engine();
  // Queues a request; an error (with an HTTP status) when it cannot be
  // served: 400 prompt too long or empty, 503 queue full.
  struct Refusal { int status; std::string message; std::string param = "prompt"; };
  std::shared_ptr<Task> submit(GenRequest req, Refusal* refusal);
  void stop();
  // Ends a request whose client has gone, queued or running: its blocks go
  // back to the pool at the scheduler's next step.
  void cancel(const std::shared_ptr<Task>& t);
  int queue_limit() const { return opt_.queue_limit; }

  EngineMetrics metrics() const;
  std::vector<SlotInfo> slots() const;
  const BlockPool& pool() const { return *pool_; }
  int tokens_per_block() const { return pool_->block_tokens(); }
  // How many whole contexts fit in the pool.
  int64_t contexts_that_fit() const;
  // Slot files (cache/cache_file.h) of a slot's kept sequence: `name`, a
  // plain file name, inside directory `dir`. Save writes a temporary file
  // created with O_EXCL | O_NOFOLLOW and renames it over the name (a link
  // there is replaced, never followed). Restore opens the name without
  // following a link and without blocking (a FIFO or device is refused, as
  // is anything but a regular file), reads and checks it outside the
  // engine's lock, and only then swaps it in: a failed restore leaves the
  // slot as it was. Errors name the file, never the directory.
  Status save_slot(int id, const std::string& dir, const std::string& name, int* n_tokens);
  Status restore_slot(int id, const std::string& dir, const std::string& name, int* n_tokens);

 private:
  struct Slot {
    int id = 0;
    std::shared_ptr<Task> task;
    std::unique_ptr<KvCache> cache;  // running, or kept after the end (keep_slot_cache)
    std::vector<int32_t> tokens;     // tokens in the cache, then the next token to feed
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<TextStream> stream;
    std::unique_ptr<HarmonyFilter> harmony;  // harmony requests
    int prompt_done = 0;             // prompt tokens in the cache
    int generated = 0;
    int reserve_tokens = 0;
    int stored_blocks = 0;           // full blocks already in the store (read from it or written)
  };
  Engine(const Model& m) : model_(m) {}
  void loop();
  bool admit_locked(const std::shared_ptr<Task>& t);
  void finish(Slot& s, const std::string& reason, const std::string& error = {});
  void emit(Slot& s, int32_t token);
  void drop_cache_locked(Slot& s);
  void drop_idle_caches_locked();
  void fetch_stored(Task& t);
  int adopt_stored_locked(KvCache& cache, Task& t);
  void store_blocks_locked(Slot& s);
  int running_locked() const;
  static void end_waiting(Task& t, const std::string& reason, const std::string& error);
  const Model& model_;
  EngineOptions opt_;
  std::shared_ptr<BlockPool> pool_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::vector<Slot> slots_;
  bool stopping_ = false;
  std::thread thread_;
  EngineMetrics m_;
  std::shared_ptr<kvstore::KvStore> store_;
  uint64_t store_fp_ = 0;
  std::atomic<bool> invalid_logged_{false};
};

}  // namespace tkv::server
