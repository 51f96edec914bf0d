// The store's keys and values (block_value.h).
#include "kvstore/block_value.h"

#include <xxhash.h>

#include <cstring>

#include "util/hash.h"

namespace tkv::kvstore {

namespace {
constexpr char kMagic[8] = {'T', 'K', 'V', 'B', 'L', 'O', 'C', 'K'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = 72;  // magic .. rows_bytes

struct Header {
  uint32_t version, block_tokens, index, n_layer;
  uint64_t fingerprint, chain, prefix, means_key, means_bytes, rows_bytes;
};

template <class T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

size_t means_bytes(const SequenceMeans& m) {
  size_t b = 0;
  for (size_t l = 0; l < m.k.size(); ++l) b += 4 + 4 * (m.k[l].size() + m.v[l].size());
  return b;
}
}  // namespace

uint64_t store_fingerprint(uint64_t model_fingerprint, const KvLayout& L, int block_tokens, int n_batch) {
  const KvCacheOptions& o = L.options();
  std::string s = "turbokv kv store v1";
  put(s, model_fingerprint);
  put(s, int32_t(L.n_layer()));
  put(s, int32_t(L.n_kv_heads()));
  put(s, int32_t(L.head_dim()));
  for (int l = 0; l < L.n_layer(); ++l) {
    const LayerCodecs& c = L.layer(l);
    s += c.kc[0]->name() + "/" + c.vc[0]->name() + ";";
    put(s, uint64_t(c.k_row));
    put(s, uint64_t(c.v_row));
    put(s, int32_t(c.mean_rows));
    put(s, int32_t(L.window(l)));
  }
  put(s, o.seed);
  put(s, uint8_t(o.mean_center));
  put(s, int32_t(o.mean_tokens));
  put(s, uint64_t(o.policy ? o.policy->fingerprint() : 0));
  put(s, int32_t(o.protect_sinks));
  put(s, int32_t(o.protect_recent));
  s += o.protect_type;
  put(s, int32_t(block_tokens));
  // The means are staged in f16 as the prompt arrives in chunks: the chunk
  // size is part of what made the rows.
  put(s, int32_t(n_batch));
  return XXH64(s.data(), s.size(), 0x74626b76u);
}

std::string store_refusal(const KvLayout& L) {
  if (L.has_windows())
    return "this model has sliding-window layers: their rings at a block boundary depend on tokens before the "
           "block, so blocks cannot be stored exactly; --kv-store is not supported for it";
  if (!L.shape().state_floats.empty())
    return "this model has recurrent (Gated DeltaNet) layers: their state at a block boundary is not stored yet, so "
           "blocks alone cannot restore a sequence; --kv-store is not supported for it";
  if (L.protected_layout())
    return "protected tokens (--kv-protect-*, the tiny presets) keep rows outside the blocks; --kv-store is not "
           "supported with them";
  return {};
}

std::vector<BlockKey> block_keys(uint64_t fingerprint, const int32_t* tokens, int n_blocks, int B) {
  std::vector<BlockKey> keys(size_t(std::max(n_blocks, 0)));
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, fingerprint);
  uint64_t chain = fingerprint;
  for (int k = 0; k < n_blocks; ++k) {
    const int32_t* t = tokens + size_t(k) * B;
    chain = BlockPool::chain_hash(chain, t, B);
    XXH64_update(st, t, sizeof(int32_t) * size_t(B));
    keys[k] = {chain, XXH64_digest(st)};
  }
  XXH64_freeState(st);
  return keys;
}

size_t max_value_bytes(const BlockPool& pool) {
  const KvLayout& L = pool.layout();
  const size_t means = size_t(L.n_layer()) * (4 + 8 * size_t(L.n_kv_heads()) * L.head_dim());
  return kHeader + size_t(pool.block_tokens()) * 4 + means + pool.block_bytes() + 8;
}

std::string encode_block(const BlockPool& pool, int32_t b, uint64_t fingerprint, const BlockKey& key, int index,
                         const int32_t* tokens, const SequenceMeans& m) {
  const int B = pool.block_tokens();
  const int L = pool.layout().n_layer();
  const size_t mb = index == 0 ? means_bytes(m) : 0;
  std::string s;
  s.reserve(kHeader + size_t(B) * 4 + mb + pool.block_bytes() + 8);
  s.append(kMagic, 8);
  put(s, kVersion);
  put(s, uint32_t(B));
  put(s, uint32_t(index));
  put(s, uint32_t(L));
  put(s, fingerprint);
  put(s, key.chain);
  put(s, key.prefix);
  put(s, means_key(&m));
  put(s, uint64_t(mb));
  put(s, uint64_t(pool.block_bytes()));
  s.append(reinterpret_cast<const char*>(tokens + size_t(index) * B), size_t(B) * 4);
  if (index == 0)
    for (size_t l = 0; l < m.k.size(); ++l) {
      put(s, uint32_t(m.k[l].size()));
      s.append(reinterpret_cast<const char*>(m.k[l].data()), 4 * m.k[l].size());
      s.append(reinterpret_cast<const char*>(m.v[l].data()), 4 * m.v[l].size());
    }
  for (int l = 0; l < L; ++l) {
    s.append(reinterpret_cast<const char*>(pool.k_base(l) + pool.k_block_bytes(l) * size_t(b)), pool.k_block_bytes(l));
    s.append(reinterpret_cast<const char*>(pool.v_base(l) + pool.v_block_bytes(l) * size_t(b)), pool.v_block_bytes(l));
  }
  put(s, uint64_t(XXH64(s.data(), s.size(), 0)));
  return s;
}

Expected<DecodedBlock> decode_block(const std::string& value, const BlockPool& pool, uint64_t fingerprint,
                                    const BlockKey& key, int index, const int32_t* tokens) {
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  const size_t n = value.size();
  const int B = pool.block_tokens();
  const KvLayout& Lay = pool.layout();
  const int L = Lay.n_layer();
  auto bad = [&](const std::string& why) { return Status::Error("block " + std::to_string(index) + ": " + why); };
  if (n < kHeader + 8) return bad("value of " + std::to_string(n) + " bytes is shorter than a header");
  if (std::memcmp(p, kMagic, 8) != 0) return bad("not a turbokv block (magic)");
  Header h;
  h.version = get<uint32_t>(p + 8);
  h.block_tokens = get<uint32_t>(p + 12);
  h.index = get<uint32_t>(p + 16);
  h.n_layer = get<uint32_t>(p + 20);
  h.fingerprint = get<uint64_t>(p + 24);
  h.chain = get<uint64_t>(p + 32);
  h.prefix = get<uint64_t>(p + 40);
  h.means_key = get<uint64_t>(p + 48);
  h.means_bytes = get<uint64_t>(p + 56);
  h.rows_bytes = get<uint64_t>(p + 64);
  if (h.version != kVersion) return bad("version " + std::to_string(h.version));
  if (h.fingerprint != fingerprint) return bad("another model, format, policy or block size (fingerprint)");
  if (h.block_tokens != uint32_t(B) || h.n_layer != uint32_t(L)) return bad("another block size or layer count");
  if (h.index != uint32_t(index) || h.chain != key.chain || h.prefix != key.prefix) return bad("another token sequence");
  if (h.rows_bytes != pool.block_bytes()) return bad("rows of another size");
  if (h.means_bytes > n || (index == 0) != (h.means_bytes > 0)) return bad("means section of the wrong size");
  const uint64_t want = kHeader + uint64_t(B) * 4 + h.means_bytes + h.rows_bytes + 8;
  if (uint64_t(n) != want)
    return bad((n < want ? "truncated: " : "trailing bytes: ") + std::to_string(n) + " bytes, the header describes " +
               std::to_string(want));
  if (get<uint64_t>(p + n - 8) != XXH64(p, n - 8, 0)) return bad("checksum mismatch");
  if (std::memcmp(p + kHeader, tokens + size_t(index) * B, size_t(B) * 4) != 0) return bad("other tokens");
  DecodedBlock d;
  d.means_key = h.means_key;
  const uint8_t* q = p + kHeader + size_t(B) * 4;
  if (index == 0) {
    auto m = std::make_shared<SequenceMeans>();
    const uint8_t* end = q + h.means_bytes;
    const size_t hd = size_t(Lay.n_kv_heads()) * Lay.head_dim();
    for (int l = 0; l < L; ++l) {
      if (end - q < 4) return bad("means section too short");
      const uint32_t c = get<uint32_t>(q);
      q += 4;
      if (c != 0 && c != hd) return bad("means of the wrong size");
      if (uint64_t(end - q) < uint64_t(c) * 8) return bad("means section too short");
      m->k.emplace_back(c);
      m->v.emplace_back(c);
      std::memcpy(m->k.back().data(), q, 4 * size_t(c));
      std::memcpy(m->v.back().data(), q + 4 * size_t(c), 4 * size_t(c));
      q += 8 * size_t(c);
    }
    if (q != end) return bad("means section of the wrong size");
    if (means_key(m.get()) != h.means_key) return bad("means do not match their key");
    d.means = std::move(m);
  }
  d.rows = q;
  return d;
}

void copy_rows(BlockPool& pool, int32_t b, const DecodedBlock& d) {
  const uint8_t* q = d.rows;
  for (int l = 0; l < pool.layout().n_layer(); ++l) {
    std::memcpy(pool.k_base(l) + pool.k_block_bytes(l) * size_t(b), q, pool.k_block_bytes(l));
    q += pool.k_block_bytes(l);
    std::memcpy(pool.v_base(l) + pool.v_block_bytes(l) * size_t(b), q, pool.v_block_bytes(l));
    q += pool.v_block_bytes(l);
  }
}

}  // namespace tkv::kvstore
