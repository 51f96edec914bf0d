#include "cache/block_pool.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "util/hash.h"
#include "util/memory.h"

namespace tkv {

Expected<std::shared_ptr<BlockPool>> BlockPool::create(std::shared_ptr<const KvLayout> layout, int block_tokens,
                                                       int64_t n_blocks, bool window_layers) {
  if (!layout) return Status::Error("block pool: no layout");
  if (block_tokens < 16 || block_tokens > 4096 || (block_tokens & (block_tokens - 1)) != 0)
    return Status::Error("block pool: block size " + std::to_string(block_tokens) +
                         " tokens is not a power of two in [16, 4096]");
  if (n_blocks < 1 || n_blocks > (int64_t(1) << 30))
    return Status::Error("block pool: " + std::to_string(n_blocks) + " blocks (need 1 .. 2^30)");
  // Checked before any buffer is made: the mappings are lazy, so an
  // impossible size would only fail (or be killed) when the pages are touched.
  uint64_t need = 0;
  if (__builtin_mul_overflow(uint64_t(layout->bytes_per_token(window_layers)) * uint64_t(block_tokens), uint64_t(n_blocks), &need))
    return Status::Error("block pool: " + std::to_string(n_blocks) + " blocks of " + std::to_string(block_tokens) +
                         " tokens overflow 64 bits of bytes");
  if (const uint64_t avail = available_memory(); need > avail)
    return Status::Error("kv cache: " + std::to_string(n_blocks * block_tokens) + " tokens of " +
                         std::to_string(layout->n_layer()) + " layers x " + std::to_string(layout->n_kv_heads()) +
                         " KV heads need " + format_bytes(need) + ", more than the " + format_bytes(avail) +
                         " of memory available (use a smaller context or KV budget, or a smaller cache format)");
  auto p = std::shared_ptr<BlockPool>(new BlockPool());
  p->layout_ = std::move(layout);
  p->block_tokens_ = block_tokens;
  while ((1 << p->shift_) < block_tokens) ++p->shift_;
  p->n_blocks_ = n_blocks;
  p->window_layers_ = window_layers;
  const KvLayout& L = *p->layout_;
  const size_t H = L.n_kv_heads();
  for (int l = 0; l < L.n_layer(); ++l) {
    const size_t here = (L.window(l) > 0) == window_layers ? H * block_tokens : 0;
    p->k_bb_.push_back(L.layer(l).k_row * here);
    p->v_bb_.push_back(L.layer(l).v_row * here);
    p->k_.emplace_back(p->k_bb_.back() * n_blocks + 64);
    p->v_.emplace_back(p->v_bb_.back() * n_blocks + 64);
  }
  p->refs_.assign(n_blocks, 0);
  p->pub_.resize(n_blocks);
  return p;
}

int64_t BlockPool::blocks_for_budget(const KvLayout& layout, int block_tokens, size_t budget) {
  const size_t per = layout.bytes_per_token() * block_tokens;
  // A layout of window layers only keeps nothing in the pool's blocks: they
  // still count a sequence's positions (the table), so give plenty.
  return per == 0 ? (int64_t(1) << 20) : static_cast<int64_t>(budget / per);
}

size_t BlockPool::block_bytes() const {
  size_t b = 0;
  for (size_t l = 0; l < k_bb_.size(); ++l) b += k_bb_[l] + v_bb_[l];
  return b;
}

void BlockPool::prefault(int l, int32_t b) {
  k_[l].prefault(k_bb_[l] * b, k_bb_[l]);
  v_[l].prefault(v_bb_[l] * b, v_bb_[l]);
}

int32_t BlockPool::allocate() {
  std::lock_guard<std::mutex> g(mu_);
  return allocate_locked();
}

int32_t BlockPool::make_writable(int32_t b) {
  std::lock_guard<std::mutex> g(mu_);
  if (refs_[b] <= 1) {
    unpublish_locked(b);
    return b;
  }
  const int32_t c = allocate_locked();
  if (c < 0) return -1;
  for (size_t l = 0; l < k_.size(); ++l) {
    std::memcpy(k_[l].data() + k_bb_[l] * c, k_[l].data() + k_bb_[l] * b, k_bb_[l]);
    std::memcpy(v_[l].data() + v_bb_[l] * c, v_[l].data() + v_bb_[l] * b, v_bb_[l]);
  }
  --refs_[b];  // still held by the others
  return c;
}

int32_t BlockPool::allocate_locked() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (next_unused_ < n_blocks_) {
    b = static_cast<int32_t>(next_unused_++);
  } else if (!lru_.empty()) {
    b = lru_.front();
    unpublish_locked(b);  // also takes it off the LRU list
    ++evictions_;
  } else {
    return -1;
  }
  refs_[b] = 1;
  ++in_use_;
  return b;
}

void BlockPool::retain(int32_t b) {
  std::lock_guard<std::mutex> g(mu_);
  if (refs_[b] == 0 && !pub_[b]) return;  // a free block is allocate()'s to hand out (misuse; ignored)
  take_locked(b);
}

void BlockPool::take_locked(int32_t b) {
  if (refs_[b]++ == 0) {  // a cached block taken back into use
    lru_.erase(pub_[b]->lru);
    ++in_use_;
  }
}

void BlockPool::release(int32_t b) {
  std::lock_guard<std::mutex> g(mu_);
  if (refs_[b] <= 0) return;  // (a bug upstream; never double-free)
  if (--refs_[b] > 0) return;
  --in_use_;
  if (pub_[b]) {
    pub_[b]->lru = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

int BlockPool::refs(int32_t b) const {
  std::lock_guard<std::mutex> g(mu_);
  return refs_[b];
}

int64_t BlockPool::available() const {
  std::lock_guard<std::mutex> g(mu_);
  return n_blocks_ - in_use_;
}

BlockPoolStats BlockPool::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  BlockPoolStats s;
  s.n_blocks = n_blocks_;
  s.in_use = in_use_;
  s.cached = static_cast<int64_t>(lru_.size());
  s.free = n_blocks_ - in_use_ - s.cached;
  s.prefix_lookups = lookups_;
  s.prefix_hits = hits_;
  s.evictions = evictions_;
  return s;
}

uint64_t BlockPool::chain_hash(uint64_t prev, const int32_t* tokens, int n) {
  return fnv1a(tokens, sizeof(int32_t) * size_t(n), prev ^ 0x9e3779b97f4a7c15ull);
}

uint64_t means_key(const SequenceMeans* m) {
  uint64_t h = 0x6a09e667f3bcc908ull;
  if (!m) return h;
  for (const auto* side : {&m->k, &m->v})
    for (const auto& mu : *side) h = fnv1a(mu.data(), sizeof(float) * mu.size(), h);
  return h;
}

void BlockPool::unpublish_locked(int32_t b) {
  Published* p = pub_[b].get();
  if (!p) return;
  auto range = index_.equal_range(p->key);
  for (auto it = range.first; it != range.second; ++it)
    if (it->second == b) {
      index_.erase(it);
      break;
    }
  if (refs_[b] == 0) lru_.erase(p->lru);
  pub_[b].reset();
}

void BlockPool::publish(int32_t b, uint64_t key, const int32_t* tokens, std::shared_ptr<const SequenceMeans> means) {
  std::lock_guard<std::mutex> g(mu_);
  if (pub_[b] || refs_[b] == 0) return;  // already published (shared), or not held by the caller
  auto range = index_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it)  // an equal block is published already: keep that one
    if (std::equal(tokens, tokens + block_tokens_, pub_[it->second]->tokens.begin())) return;
  auto p = std::make_unique<Published>();
  p->key = key;
  p->tokens.assign(tokens, tokens + block_tokens_);
  p->means = std::move(means);
  pub_[b] = std::move(p);
  index_.emplace(key, b);
}

int32_t BlockPool::lookup(uint64_t key, const int32_t* tokens, std::shared_ptr<const SequenceMeans>* means) {
  std::lock_guard<std::mutex> g(mu_);
  auto range = index_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) {
    const int32_t b = it->second;
    if (!std::equal(tokens, tokens + block_tokens_, pub_[b]->tokens.begin())) continue;
    take_locked(b);
    if (means) *means = pub_[b]->means;
    return b;
  }
  return -1;
}

void BlockPool::count_share(int blocks_found) {
  std::lock_guard<std::mutex> g(mu_);
  ++lookups_;
  hits_ += blocks_found;
}

}  // namespace tkv
