// KV memory as a pool of fixed-size blocks (docs/ARCHITECTURE.md, "Paged
// cache"): the one owner of cached rows. A block holds block_tokens tokens of
// every layer and KV head, K and V each in its layer's format, head-major
// inside the block (a head's rows of the block are contiguous, so attention
// streams them). Sequences (KvCache) hold tables of block ids; one table
// serves every layer, since block b sits at the same index in each layer's
// buffer.
//
// Memory: n_blocks x bytes_per_token x block_tokens, plus 64 bytes per
// buffer that kernels may read past the last row. Blocks are reference
// counted: a block full of a prompt's rows can be shared read-only by every
// sequence that starts with the same tokens. A published block (see
// publish) stays in the prefix cache after its last reference is dropped,
// until allocate() needs it (least recently released first).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cache/kv_layout.h"
#include "util/huge_buffer.h"
#include "util/status.h"

namespace tkv {

// A sequence's means (per layer, [n_kv_heads][head_dim] for K and V), kept
// with the first block of a published prefix so a sequence that shares the
// prefix centres its own rows the same way.
struct SequenceMeans {
  std::vector<std::vector<float>> k, v;
};

// Blocks after a sequence's first are keyed by the means they were centred
// with too: two sequences with the same first block of tokens can have other
// means (the means come from the first mean_tokens rows, staged in f16
// depending on the batching), and a chain must never continue with rows
// centred differently. (Also in the shared store's values: kvstore/.)
uint64_t means_key(const SequenceMeans* m);

struct BlockPoolStats {
  int64_t n_blocks = 0, in_use = 0, cached = 0, free = 0;
  int64_t prefix_lookups = 0;  // share attempts
  int64_t prefix_hits = 0;     // blocks shared instead of evaluated
  int64_t evictions = 0;       // cached blocks reclaimed by allocate()
};

class BlockPool {
 public:
  // block_tokens: a power of two in [16, 4096]. A pool holds the rows of the
  // layout's full layers, or with window_layers those of its sliding-window
  // layers (the blocks of sequences' rings); the other layers' buffers are
  // empty.
  static Expected<std::shared_ptr<BlockPool>> create(std::shared_ptr<const KvLayout> layout, int block_tokens,
                                                     int64_t n_blocks, bool window_layers = false);
  // How many blocks of block_tokens of the full layers fit in `budget` bytes
  // (0 if not one; every block when the layout has no full layer).
  static int64_t blocks_for_budget(const KvLayout& layout, int block_tokens, size_t budget);
  bool window_layers() const { return window_layers_; }

  const KvLayout& layout() const { return *layout_; }
  const std::shared_ptr<const KvLayout>& layout_ptr() const { return layout_; }
  int block_tokens() const { return block_tokens_; }
  int block_shift() const { return shift_; }
  int64_t n_blocks() const { return n_blocks_; }
  size_t k_block_bytes(int l) const { return k_bb_[l]; }
  size_t v_block_bytes(int l) const { return v_bb_[l]; }
  size_t block_bytes() const;  // every layer, K and V
  uint8_t* k_base(int l) { return k_[l].data(); }
  uint8_t* v_base(int l) { return v_[l].data(); }
  const uint8_t* k_base(int l) const { return k_[l].data(); }
  const uint8_t* v_base(int l) const { return v_[l].data(); }
  const uint8_t* k_end(int l) const { return k_[l].data() + k_[l].size(); }
  const uint8_t* v_end(int l) const { return v_[l].data() + v_[l].size(); }
  // Maps block b's pages of one layer now (before filling it from a file).
  void prefault(int l, int32_t b);

  // A block with one reference, or -1 when every block is referenced.
  // Takes a never-used or released block first, then evicts the least
  // recently released cached block.
  int32_t allocate();
  // Another reference to a block the caller holds (or a cached one).
  void retain(int32_t b);
  // Drops a reference; at zero the block is free again, or cached when it
  // was published.
  void release(int32_t b);
  int refs(int32_t b) const;
  // Block b made safe to write for a caller holding one reference: b itself
  // when no one else holds it (taken out of the prefix cache), else a fresh
  // copy (the caller's reference moves to it); -1 when no block is left.
  int32_t make_writable(int32_t b);
  // Blocks allocate() can hand out now (free + cached).
  int64_t available() const;
  BlockPoolStats stats() const;

  // Prefix cache. A full block whose rows are the rows of tokens[0, end) of a
  // sequence, end = (index + 1) * block_tokens: its key is the chain hash of
  // those tokens; `tokens` are its own block_tokens tokens (kept to rule out
  // hash collisions); `means` go with a sequence's first block.
  static uint64_t chain_hash(uint64_t prev, const int32_t* tokens, int n);
  void publish(int32_t b, uint64_t key, const int32_t* tokens, std::shared_ptr<const SequenceMeans> means);
  // The published block with this key and tokens, retained; -1 if none.
  int32_t lookup(uint64_t key, const int32_t* tokens, std::shared_ptr<const SequenceMeans>* means = nullptr);
  // Counts a share attempt and the blocks it found (metrics).
  void count_share(int blocks_found);

 private:
  BlockPool() = default;
  void unpublish_locked(int32_t b);
  int32_t allocate_locked();
  void take_locked(int32_t b);  // one more reference; a cached block leaves the LRU list
  std::shared_ptr<const KvLayout> layout_;
  int block_tokens_ = 0, shift_ = 0;
  int64_t n_blocks_ = 0;
  bool window_layers_ = false;
  std::vector<HugeBuffer> k_, v_;  // per layer
  std::vector<size_t> k_bb_, v_bb_;
  mutable std::mutex mu_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // never used or released unpublished (a stack)
  int64_t next_unused_ = 0;    // blocks [next_unused_, n_blocks_) were never handed out
  struct Published {
    uint64_t key = 0;
    std::vector<int32_t> tokens;
    std::shared_ptr<const SequenceMeans> means;
    std::list<int32_t>::iterator lru;  // valid while refs == 0
  };
  std::vector<std::unique_ptr<Published>> pub_;   // per block, null when not published
  std::unordered_multimap<uint64_t, int32_t> index_;
  std::list<int32_t> lru_;  // cached blocks (published, unreferenced), least recent first
  int64_t in_use_ = 0, lookups_ = 0, hits_ = 0, evictions_ = 0;
};

}  // namespace tkv
