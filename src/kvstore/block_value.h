// Keys and values of the shared block store (docs/FORMATS.md §4h).
//
// Key: content-addressed. A sequence's block k (tokens [kB, (k+1)B)) is
// keyed by the in-process prefix cache's chain (BlockPool::chain_hash) seeded
// with the store fingerprint instead of 0: a hash of the model, the cache
// layout (formats, row sizes, codec seed, policy, mean rule), the block size
// and prompt chunk, and every token id up to the block's end. The value
// repeats the chain, carries a second, independent hash of those tokens
// (XXH64) and the block's own tokens, so a 64-bit key collision is caught.
//
// Value: "TKVBLOCK", version, block tokens, index, layers, fingerprint,
// chain, prefix hash, means key, section sizes, the block's tokens, the
// sequence's means (block 0 only: what later blocks were centred with),
// every layer's K then V rows as the pool holds them, then XXH64 of all
// the bytes before it. Means are not in the key (a lookup is one round trip
// for every block): each value names the means key its rows were centred
// with, and a chain is used only while that equals the sequence's.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/kv_layout.h"
#include "util/status.h"

namespace tkv::kvstore {

// What must be equal for two servers' rows of the same tokens to be equal.
uint64_t store_fingerprint(uint64_t model_fingerprint, const KvLayout& layout, int block_tokens, int n_batch);

// Why a layout cannot be stored (windows, recurrent state, protected rows),
// or empty when it can.
std::string store_refusal(const KvLayout& layout);

struct BlockKey {
  uint64_t chain = 0;   // the key's hash
  uint64_t prefix = 0;  // XXH64 of tokens [0, end of block)
};
// Keys of the first n_blocks blocks of tokens.
std::vector<BlockKey> block_keys(uint64_t fingerprint, const int32_t* tokens, int n_blocks, int block_tokens);

// The value of pool block b, block `index` of a sequence with `tokens`
// (from its start) and means m.
std::string encode_block(const BlockPool& pool, int32_t b, uint64_t fingerprint, const BlockKey& key, int index,
                         const int32_t* tokens, const SequenceMeans& m);
// The largest value of this pool's blocks (the first block's, with means).
size_t max_value_bytes(const BlockPool& pool);

struct DecodedBlock {
  const uint8_t* rows = nullptr;  // into the value
  uint64_t means_key = 0;         // what the rows were centred with
  std::shared_ptr<SequenceMeans> means;  // block 0 only
};
// Checks everything (size, magic, version, fingerprint, key, tokens, section
// sizes, checksum, means) against what the caller asked for; an error
// naming the first mismatch.
Expected<DecodedBlock> decode_block(const std::string& value, const BlockPool& pool, uint64_t fingerprint,
                                    const BlockKey& key, int index, const int32_t* tokens);
// Copies a decoded block's rows into pool block b.
void copy_rows(BlockPool& pool, int32_t b, const DecodedBlock& d);

}  // namespace tkv::kvstore
