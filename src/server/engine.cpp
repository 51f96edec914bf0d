#include "server/engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <cstdio>

#include "cache/cache_file.h"

namespace tkv::server {

bool Task::next(std::string& text) {
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done || !pending.empty(); });
  text.swap(pending);
  pending.clear();
  return !text.empty() || !done;
}

Task::Next Task::next_for(std::string& text, int ms) {
  std::unique_lock<std::mutex> lk(mu);
  text.clear();
  if (!cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done || !pending.empty(); })) return Next::kTimeout;
  text.swap(pending);
  pending.clear();
  return !text.empty() || !done ? Next::kText : Next::kEnd;
}

bool Task::done_now() {
  std::lock_guard<std::mutex> lk(mu);
  return done;
}

Expected<std::unique_ptr<Engine>> Engine::create(const Model& model, const KvCacheOptions& co, const EngineOptions& opt) {
  const ModelConfig& c = model.config();
  if (opt.n_parallel < 1 || opt.n_parallel > 1024) return Status::Error("-np must be in 1..1024");
  if (opt.ctx < 16) return Status::Error("the context (-c) must be at least 16 tokens");
  if (opt.n_batch < 1) return Status::Error("the batch size (-b) must be at least 1");
  KvCacheOptions o = co;
  o.capacity = opt.ctx;
  auto layout = KvLayout::create(c.kv_shape(), o);
  if (!layout) return layout.status();
  // What each slot's sequence holds outside the pool: its sliding-window
  // ring and its recurrent state (fixed sizes), out of the budget first.
  size_t fixed = size_t((*layout)->max_ring_tokens()) * (*layout)->bytes_per_token(true);
  for (size_t f : (*layout)->shape().state_floats) fixed += f * sizeof(float);
  if (fixed * size_t(opt.n_parallel) >= opt.kv_budget)
    return Status::Error("--kv-budget of " + std::to_string(opt.kv_budget >> 20) + " MiB does not hold the " +
                         std::to_string(opt.n_parallel) + " slots' sliding-window rings and recurrent state (" +
                         std::to_string((fixed * opt.n_parallel) >> 20) + " MiB); raise --kv-budget or lower -np");
  const int64_t n_blocks =
      BlockPool::blocks_for_budget(**layout, opt.block_tokens, opt.kv_budget - fixed * size_t(opt.n_parallel));
  const int64_t per_ctx = (opt.ctx + opt.block_tokens - 1) / opt.block_tokens;
  if (n_blocks < per_ctx)
    return Status::Error("--kv-budget of " + std::to_string(opt.kv_budget >> 20) + " MiB holds " +
                         std::to_string(n_blocks) + " blocks of " + std::to_string(opt.block_tokens) +
                         " tokens, fewer than one context of " + std::to_string(opt.ctx) + " tokens needs (" +
                         std::to_string(per_ctx) + "); raise --kv-budget or lower -c");
  if (opt.store)
    if (const std::string why = kvstore::store_refusal(**layout); !why.empty()) return Status::Error("--kv-store: " + why);
  const uint64_t store_fp = opt.store ? kvstore::store_fingerprint(model.fingerprint(), **layout, opt.block_tokens, opt.n_batch) : 0;
  auto pool = BlockPool::create(std::move(*layout), opt.block_tokens, n_blocks);
  if (!pool) return pool.status();
  auto e = std::unique_ptr<Engine>(new Engine(model));
  e->store_ = opt.store;
  e->store_fp_ = store_fp;
  e->opt_ = opt;
  e->pool_ = std::move(*pool);
  if (e->store_) e->store_->set_max_value_bytes(kvstore::max_value_bytes(*e->pool_));
  e->slots_.resize(opt.n_parallel);
  for (int i = 0; i < opt.n_parallel; ++i) e->slots_[i].id = i;
  e->m_.budget = opt.kv_budget;
  e->m_.block_bytes = e->pool_->block_bytes();
  e->thread_ = std::thread([p = e.get()] { p->loop(); });
  return e;
}

Engine::~Engine() { stop(); }

void Engine::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t Engine::contexts_that_fit() const {
  return pool_->n_blocks() / ((opt_.ctx + pool_->block_tokens() - 1) / pool_->block_tokens());
}

void Engine::cancel(const std::shared_ptr<Task>& t) {
  if (!t) return;
  t->cancelled = true;
  { std::lock_guard<std::mutex> g(mu_); }  // the scheduler is waiting or will look at the flag
  cv_.notify_all();
}

std::shared_ptr<Task> Engine::submit(GenRequest req, Refusal* refusal) {
  const int64_t P = static_cast<int64_t>(req.prompt.size());
  auto refuse_locked = [&](int status, std::string msg, const char* param = "prompt") {
    if (refusal) *refusal = {status, std::move(msg), param};
    ++m_.rejected;
    return nullptr;
  };
  auto refuse = [&](int status, std::string msg, const char* param = "prompt") {
    std::lock_guard<std::mutex> g(mu_);
    return refuse_locked(status, std::move(msg), param);
  };
  if (P == 0) return refuse(400, "the prompt is empty");
  if (req.max_tokens < -1 || req.max_tokens == 0)
    return refuse(400, "'max_tokens' must be an integer >= 1, or -1 for no limit", "max_tokens");
  // What it will hold at most: 64-bit, capped by the context. A request
  // needing more blocks than the whole pool could never be admitted.
  const int64_t want = req.max_tokens < 0 ? opt_.ctx : std::min<int64_t>(opt_.ctx, P + int64_t(req.max_tokens));
  const int64_t bt = pool_->block_tokens();
  if ((want + bt - 1) / bt > pool_->n_blocks())
    return refuse(400, "the request needs " + std::to_string((want + bt - 1) / bt) + " KV blocks, the pool has " +
                           std::to_string(pool_->n_blocks()), "max_tokens");
  if (P >= opt_.ctx)
    return refuse(400, "the prompt has " + std::to_string(P) + " tokens, the context holds " + std::to_string(opt_.ctx) +
                           " (prompt and generated tokens together)");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model_.config().n_vocab)
      return refuse(400, "prompt token id " + std::to_string(t) + " is outside the vocabulary (" +
                             std::to_string(model_.config().n_vocab) + ")");
  if (req.slot >= static_cast<int>(slots_.size()))
    return refuse(400, "id_slot " + std::to_string(req.slot) + " does not exist (" + std::to_string(slots_.size()) +
                           " slots)");
  auto t = std::make_shared<Task>();
  t->req = std::move(req);
  t->prompt_tokens = P;
  if (store_) fetch_stored(*t);  // on the caller's thread, not the scheduler's
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) return refuse_locked(503, "the server is shutting down", "");
    if (static_cast<int>(queue_.size()) >= opt_.queue_limit)
      return refuse_locked(503, "the server is busy: " + std::to_string(queue_.size()) + " requests are waiting", "");
    queue_.push_back(t);
    ++m_.requests;
  }
  cv_.notify_all();
  return t;
}

// An idle slot's kept sequence goes back to the pool; its full blocks stay
// shareable in the prefix cache.
void Engine::drop_cache_locked(Slot& s) {
  if (!s.cache) return;
  s.cache->publish(s.tokens.data());
  s.cache.reset();
  s.tokens.clear();
}

void Engine::drop_idle_caches_locked() {
  for (Slot& s : slots_)
    if (!s.task) drop_cache_locked(s);
}

int Engine::running_locked() const {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !!s.task; }));
}

// Ends a request that never ran (its client left, or the server stops).
void Engine::end_waiting(Task& t, const std::string& reason, const std::string& error) {
  {
    std::lock_guard<std::mutex> g(t.mu);
    t.finish_reason = reason;
    t.error = error;
    t.done = true;
  }
  t.cv.notify_all();
}

// The prompt's blocks after those the local prefix cache holds now, from the
// store in one round trip; kept up to the first missing or invalid one.
void Engine::fetch_stored(Task& t) {
  const std::vector<int32_t>& p = t.req.prompt;
  const int B = pool_->block_tokens();
  const int full = std::min(static_cast<int>(p.size()) - 1, opt_.ctx) / B;  // the last prompt token is always evaluated
  if (full <= 0) return;
  int local = 0;
  if (auto probe = KvCache::create_in(pool_, opt_.ctx)) local = (*probe)->share_prefix(p.data(), full * B, false) / B;
  if (local >= full) return;
  const std::vector<kvstore::BlockKey> keys = kvstore::block_keys(store_fp_, p.data(), full, B);
  std::vector<std::string> names;
  for (int k = local; k < full; ++k) names.push_back(store_->key(keys[k].chain));
  std::vector<std::string> values = store_->get(names);
  t.store_first = local;
  for (int k = local; k < full; ++k) {
    std::string& v = values[k - local];
    if (v.empty()) break;
    auto d = kvstore::decode_block(v, *pool_, store_fp_, keys[k], k, p.data());
    if (!d) {
      store_->count_invalid();
      if (!invalid_logged_.exchange(true))
        std::fprintf(stderr, "kv store: ignored an invalid value (%s); counted in turbokv_kv_store_invalid_values_total, "
                     "logged once\n", d.error().c_str());
      break;
    }
    const size_t rows = d->rows - reinterpret_cast<const uint8_t*>(v.data());
    t.stored.push_back({std::move(v), *d});
    // (a moved string keeps its heap buffer; re-pointed all the same)
    t.stored.back().block.rows = reinterpret_cast<const uint8_t*>(t.stored.back().value.data()) + rows;
  }
}

// Appends the fetched blocks that continue `cache` (its local prefix) to
// it; returns the blocks adopted.
int Engine::adopt_stored_locked(KvCache& cache, Task& t) {
  const int B = pool_->block_tokens();
  const int have = cache.n_tokens() / B;
  const int n = static_cast<int>(t.stored.size());
  if (have < t.store_first || have >= t.store_first + n || !cache.shareable()) return 0;
  // Only a chain centred with this sequence's means (the first block brings them).
  const uint64_t mk = have > 0 ? means_key(cache.means().get())
                               : (t.stored[0].block.means ? means_key(t.stored[0].block.means.get()) : 0);
  int usable = 0;
  for (int i = have - t.store_first; i < n && t.stored[i].block.means_key == mk; ++i) ++usable;
  if (have == 0 && (usable == 0 || !t.stored[0].block.means || usable * B < cache.mean_rows())) return 0;
  int adopted = 0;
  for (int i = have - t.store_first; adopted < usable; ++i, ++adopted) {
    const int32_t b = pool_->allocate();
    if (b < 0) break;
    kvstore::copy_rows(*pool_, b, t.stored[i].block);
    if (!cache.adopt_block(b, t.stored[i].block.means.get()).ok()) {
      pool_->release(b);
      break;
    }
  }
  return adopted;
}

// Writes the full blocks of a slot's sequence that are final and not in the
// store yet (write-behind: into the store's bounded queue).
void Engine::store_blocks_locked(Slot& s) {
  if (!store_ || !s.cache || !s.cache->shareable()) return;
  const int B = pool_->block_tokens();
  const int full = std::min(s.cache->n_tokens(), static_cast<int>(s.tokens.size())) / B;
  if (full <= s.stored_blocks) return;
  for (int l = 0; l < s.cache->n_layer(); ++l)
    if (s.cache->staging(l) || s.cache->layer_tokens(l) != s.cache->n_tokens()) return;  // rows not final yet
  const std::vector<kvstore::BlockKey> keys = kvstore::block_keys(store_fp_, s.tokens.data(), full, B);
  const auto m = s.cache->means();
  for (int k = s.stored_blocks; k < full; ++k) {
    if (!store_->has_room(pool_->block_bytes())) {
      store_->count_dropped();
      continue;
    }
    store_->put(store_->key(keys[k].chain),
                kvstore::encode_block(*pool_, s.cache->block_table()[k], store_fp_, keys[k], k, s.tokens.data(), *m));
  }
  s.stored_blocks = full;
}

bool Engine::admit_locked(const std::shared_ptr<Task>& t) {
  Slot* slot = nullptr;
  if (t->req.slot >= 0) {
    if (!slots_[t->req.slot].task) slot = &slots_[t->req.slot];
  } else {
    for (Slot& s : slots_)  // an idle slot, one without a kept cache first
      if (!s.task && (!slot || (slot->cache && !s.cache))) slot = &s;
  }
  if (!slot) return false;
  drop_cache_locked(*slot);
  const GenRequest& r = t->req;
  const int P = static_cast<int>(r.prompt.size());
  // 64-bit: P + max_tokens overflows int for max_tokens near INT_MAX.
  const int want = static_cast<int>(r.max_tokens < 0 ? int64_t(opt_.ctx)
                                                     : std::min<int64_t>(opt_.ctx, int64_t(P) + int64_t(r.max_tokens)));
  auto made = KvCache::create_in(pool_, opt_.ctx);
  if (!made) return false;
  std::unique_ptr<KvCache> cache = std::move(*made);
  // Whole shared blocks only, and the last prompt token is always evaluated
  // (its logits start generation).
  const int local = cache->share_prefix(r.prompt.data(), P - 1);
  const int adopted = store_ ? adopt_stored_locked(*cache, *t) : 0;
  if (cache->n_tokens() > 0 && cache->n_tokens() < cache->mean_rows()) {  // (a partial adoption: start again without)
    auto again = KvCache::create_in(pool_, opt_.ctx);
    if (!again) return false;
    cache = std::move(*again);
    cache->share_prefix(r.prompt.data(), P - 1, false);
  }
  const int shared = cache->n_tokens();
  Status s = cache->reserve(want);
  if (!s.ok()) {
    drop_idle_caches_locked();
    s = cache->reserve(want);
  }
  if (!s.ok()) return false;  // waits for blocks
  slot->task = t;
  slot->cache = std::move(cache);
  slot->tokens = r.prompt;
  slot->sampler = std::make_unique<Sampler>(r.sampling);
  slot->stream = std::make_unique<TextStream>(r.stop);
  slot->harmony = r.harmony ? std::make_unique<HarmonyFilter>(r.harmony_ids) : nullptr;
  slot->prompt_done = shared;
  slot->generated = 0;
  slot->reserve_tokens = want;
  slot->stored_blocks = shared / pool_->block_tokens();
  t->cached_tokens = shared;
  m_.prompt_tokens += P;
  m_.prefix_hit_tokens += std::min(local, shared);
  if (shared > local) {
    m_.store_hit_tokens += shared - local;
    m_.store_blocks_adopted += adopted;
  }
  t->stored.clear();
  t->stored.shrink_to_fit();
  return true;
}

void Engine::finish(Slot& s, const std::string& reason, const std::string& error) {
  const std::shared_ptr<Task> t = s.task;
  {
    std::lock_guard<std::mutex> g(t->mu);
    if (s.stream) t->pending += s.stream->finish();
    t->finish_reason = reason;
    t->error = error;
    t->completion_tokens = s.generated;
    t->done = true;
  }
  t->cv.notify_all();
  if (reason == "cancelled") ++m_.cancelled;
  // The tokens the cache holds (the last sampled token was never fed).
  s.tokens.resize(s.cache->n_tokens());
  if (error.empty()) {
    s.cache->publish(s.tokens.data());
    store_blocks_locked(s);
  }
  if (!opt_.keep_slot_cache || !error.empty()) {
    s.cache.reset();  // blocks back to the pool (published ones stay cached)
    s.tokens.clear();
  }
  s.task.reset();
  s.sampler.reset();
  s.stream.reset();
  s.harmony.reset();
}

void Engine::emit(Slot& s, int32_t token) {
  const GenRequest& r = s.task->req;
  if (std::find(r.end_tokens.begin(), r.end_tokens.end(), token) != r.end_tokens.end()) return finish(s, "stop");
  ++s.generated;
  ++m_.generated;
  const Tokenizer& tok = model_.tokenizer();
  std::string piece = tok.is_control(token) ? std::string() : tok.piece(token);
  if (s.harmony) piece = s.harmony->push(token, piece);
  const std::string text = s.stream->push(piece);
  if (!text.empty()) {
    {
      std::lock_guard<std::mutex> g(s.task->mu);
      s.task->pending += text;
      s.task->completion_tokens = s.generated;
    }
    s.task->cv.notify_all();
  }
  if (s.stream->stopped()) return finish(s, "stop");
  if (r.max_tokens >= 0 && s.generated >= r.max_tokens) return finish(s, "length");
  // Prompt + generated tokens stay within the context (the last one is
  // never fed, so the cache holds one fewer).
  if (s.cache->n_tokens() + 1 >= std::min(opt_.ctx, s.reserve_tokens)) return finish(s, "length");
  s.tokens.push_back(token);
}

void Engine::loop() {
  using clock = std::chrono::steady_clock;
  const int n_vocab = model_.config().n_vocab;
  std::vector<std::vector<float>> logits(slots_.size(), std::vector<float>(n_vocab));
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    for (auto it = queue_.begin(); it != queue_.end();) {  // clients gone while waiting
      if ((*it)->cancelled) {
        end_waiting(**it, "cancelled", "");
        ++m_.cancelled;
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (stopping_) {
      for (Slot& s : slots_)
        if (s.task) finish(s, "error", "the server is shutting down");
      for (auto& t : queue_) end_waiting(*t, "error", "the server is shutting down");
      queue_.clear();
      return;
    }
    while (!queue_.empty() && admit_locked(queue_.front())) queue_.pop_front();
    // Nothing runs and the head still does not fit: it never will (every
    // block it could get is free or evictable). It ends now rather than
    // holding every later request behind it.
    if (!queue_.empty() && running_locked() == 0) {
      end_waiting(*queue_.front(), "error", "the request cannot be admitted: its KV blocks exceed the pool");
      ++m_.rejected;
      queue_.pop_front();
      continue;
    }
    for (Slot& s : slots_)
      if (s.task && s.task->cancelled) finish(s, "cancelled");
    // The step: every decoding sequence's next token, then whole prompt
    // chunks while the step's token budget lasts (at least one).
    std::vector<Model::BatchSeq> batch;
    std::vector<Slot*> who;
    // A sequence whose logits come out NaN or Inf ends with an error; the
    // others of the step go on (Model::BatchSeq::nonfinite_logits).
    std::unique_ptr<bool[]> bad(new bool[slots_.size()]());
    int budget = opt_.step_tokens, prompt_rows = 0, decode_rows = 0;
    for (Slot& s : slots_)
      if (s.task && s.prompt_done == static_cast<int>(s.task->req.prompt.size())) {
        const int pos = s.cache->n_tokens();
        batch.push_back({s.cache.get(), &s.tokens[pos], 1, pos, logits[s.id].data(), &bad[s.id]});
        who.push_back(&s);
        --budget;
        ++decode_rows;
      }
    for (Slot& s : slots_) {
      const int P = s.task ? static_cast<int>(s.task->req.prompt.size()) : 0;
      if (!s.task || s.prompt_done == P) continue;
      const int n = std::min(opt_.n_batch, P - s.prompt_done);
      if (n > budget && prompt_rows > 0) continue;
      const bool last = s.prompt_done + n == P;
      batch.push_back(
          {s.cache.get(), &s.tokens[s.prompt_done], n, s.prompt_done, last ? logits[s.id].data() : nullptr, &bad[s.id]});
      who.push_back(&s);
      budget -= n;
      prompt_rows += n;
    }
    if (batch.empty()) {
      cv_.wait(lk);
      continue;
    }
    m_.peak_running = std::max(m_.peak_running, running_locked());
    lk.unlock();
    const auto t0 = clock::now();
    const Status st = model_.forward_batch(batch, opt_.threads);
    const double sec = std::chrono::duration<double>(clock::now() - t0).count();
    lk.lock();
    const double per_row = sec / (prompt_rows + decode_rows);
    m_.prompt_seconds += per_row * prompt_rows;
    m_.gen_seconds += per_row * decode_rows;
    m_.prompt_evaluated += prompt_rows;
    for (size_t i = 0; i < who.size(); ++i) {
      Slot& s = *who[i];
      if (!st.ok()) {
        finish(s, "error", st.message());
        continue;
      }
      if (bad[s.id]) {
        finish(s, "error", "the model's logits at position " + std::to_string(batch[i].pos + batch[i].n - 1) +
                               " are NaN or Inf (broken weights or an overflowing activation)");
        continue;
      }
      const int P = static_cast<int>(s.task->req.prompt.size());
      if (s.prompt_done < P) {
        s.prompt_done += batch[i].n;
        store_blocks_locked(s);  // the blocks this chunk completed
        if (s.prompt_done < P) continue;
        s.cache->publish(s.tokens.data());  // the prompt's full blocks, for requests that share them
      }
      const int32_t next = s.sampler->sample(logits[s.id].data(), n_vocab, s.tokens, static_cast<size_t>(P));
      emit(s, next);
    }
  }
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> g(mu_);
  EngineMetrics m = m_;
  m.running = running_locked();
  m.queued = static_cast<int>(queue_.size());
  m.pool = pool_->stats();
  if (store_) {
    m.has_store = true;
    m.store = store_->stats();
    m.store_state = store_->state();
  }
  m.idle_slot_blocks = 0;
  for (const Slot& s : slots_)
    if (!s.task && s.cache) m.idle_slot_blocks += static_cast<int64_t>(s.cache->block_table().size());
  return m;
}

std::vector<SlotInfo> Engine::slots() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<SlotInfo> out;
  for (const Slot& s : slots_) {
    SlotInfo i;
    i.id = s.id;
    i.processing = !!s.task;
    i.n_ctx = opt_.ctx;
    i.n_prompt = s.task ? static_cast<int>(s.task->req.prompt.size()) : 0;
    i.n_cached = s.task ? s.task->cached_tokens : 0;
    i.n_decoded = s.generated;
    i.n_tokens = s.cache ? s.cache->n_tokens() : 0;
    out.push_back(i);
  }
  return out;
}

Status Engine::save_slot(int id, const std::string& dir, const std::string& name, int* n_tokens) {
  std::lock_guard<std::mutex> g(mu_);
  if (id < 0 || id >= static_cast<int>(slots_.size())) return Status::Error("slot " + std::to_string(id) + " does not exist");
  Slot& s = slots_[id];
  if (s.task) return Status::Error("slot " + std::to_string(id) + " is processing a request");
  if (!s.cache || s.cache->n_tokens() == 0) return Status::Error("slot " + std::to_string(id) + " holds no tokens");
  *n_tokens = s.cache->n_tokens();
  // The temporary file is created with O_EXCL | O_NOFOLLOW (util/atomic_file.h).
  const Status st = save_cache_file(dir + "/" + name, *s.cache, model_.fingerprint(), s.tokens);
  if (st.ok()) return st;
  // The writer's message names the temporary path (directory and PID): only its reason is kept.
  const std::string& m = st.message();
  const size_t colon = m.rfind(": ");
  return Status::Error("cannot write slot file '" + name + "'" + (colon == std::string::npos ? "" : m.substr(colon)));
}

Status Engine::restore_slot(int id, const std::string& dir, const std::string& name, int* n_tokens) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (id < 0 || id >= static_cast<int>(slots_.size())) return Status::Error("slot " + std::to_string(id) + " does not exist");
    if (slots_[id].task) return Status::Error("slot " + std::to_string(id) + " is processing a request");
  }
  // Opened without following a link and without blocking (a FIFO would
  // block open() until a writer came), then checked to be a regular file.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Status::Error("the slot directory cannot be opened: " + std::string(std::strerror(errno)));
  const int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  const int err = errno;
  ::close(dfd);
  if (fd < 0)
    return Status::Error("slot file '" + name + "': " +
                         (err == ELOOP ? std::string("is a symbolic link (not followed)") : std::string(std::strerror(err))));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error("slot file '" + name + "' is not a regular file");
  }
  auto src = open_fd_source(fd, static_cast<uint64_t>(st.st_size));  // owns fd
  // Read and checked outside the engine's lock: other requests go on.
  auto load = [&] { return load_cache_file_into(*src, pool_, opt_.ctx, model_.fingerprint(), model_.config().n_vocab); };
  auto loaded = load();
  if (!loaded) {
    {  // perhaps no free blocks: other idle slots' kept sequences give theirs back
      std::lock_guard<std::mutex> g(mu_);
      for (Slot& o : slots_)
        if (!o.task && o.id != id) drop_cache_locked(o);
    }
    loaded = load();
  }
  if (!loaded) return Status::Error("slot file '" + name + "': " + loaded.error());
  std::lock_guard<std::mutex> g(mu_);
  Slot& s = slots_[id];
  if (s.task) return Status::Error("slot " + std::to_string(id) + " is processing a request");
  drop_cache_locked(s);
  s.cache = std::move(loaded->cache);
  s.tokens = std::move(loaded->tokens);
  s.cache->publish(s.tokens.data());  // its full blocks serve the next request that starts with them
  *n_tokens = s.cache->n_tokens();
  return Status::Ok();
}

}  // namespace tkv::server
