#include "cache/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <string>

#include "util/hash.h"

namespace tkv {

Expected<std::unique_ptr<KvCache>> KvCache::create(const KvShape& shape, const KvCacheOptions& o) {
  auto layout = KvLayout::create(shape, o);
  if (!layout) return layout.status();
  // 256-token blocks (a head's block of tq4 rows at d 128 is 17 KiB, long
  // enough to stream); a smaller context gets one block of its size.
  int block = 256;
  while (block > 16 && block / 2 >= o.capacity) block /= 2;
  auto pool = BlockPool::create(std::move(*layout), block, (int64_t(o.capacity) + block - 1) / block);
  if (!pool) return pool.status();
  return create_in(std::move(*pool), o.capacity);
}

Expected<std::unique_ptr<KvCache>> KvCache::create_in(std::shared_ptr<BlockPool> pool, int capacity) {
  if (!pool) return Status::Error("kv cache: no block pool");
  if (capacity < 1) return Status::Error("kv cache: capacity must be at least 1 token");
  auto c = std::unique_ptr<KvCache>(new KvCache());
  c->layout_ = pool->layout_ptr();
  c->pool_ = std::move(pool);
  c->capacity_ = capacity;
  const KvLayout& L = *c->layout_;
  const int H = L.n_kv_heads(), d = L.head_dim();
  c->seq_.resize(L.n_layer());
  for (size_t f : L.shape().state_floats) c->state_.emplace_back(f, 0.0f);
  if (L.has_windows()) {  // the ring: the most any window layer needs, in its own small pool
    const int n = L.max_ring_tokens() / kRingBlock;
    auto rp = BlockPool::create(c->layout_, kRingBlock, n, true);
    if (!rp) return rp.status();
    c->ring_pool_ = std::move(*rp);
    for (int i = 0; i < n; ++i) c->ring_.push_back(c->ring_pool_->allocate());
    for (int j = 0; j < (capacity + kRingBlock - 1) / kRingBlock; ++j) c->ring_view_.push_back(c->ring_[j % n]);
  }
  if (const auto& hl = L.protected_layout_ptr()) {  // sinks, then the recent ring
    const int sink_blocks = (std::min(L.options().protect_sinks, capacity) + kRingBlock - 1) / kRingBlock;
    const int ring_blocks = L.protect_ring_tokens() / kRingBlock;
    auto hp = BlockPool::create(hl, kRingBlock, std::max(1, sink_blocks + ring_blocks));
    if (!hp) return hp.status();
    c->hi_pool_ = std::move(*hp);
    for (int i = 0; i < sink_blocks; ++i) c->hi_sinks_.push_back(c->hi_pool_->allocate());
    std::vector<int32_t> ring;
    for (int i = 0; i < ring_blocks; ++i) ring.push_back(c->hi_pool_->allocate());
    if (!ring.empty())
      for (int j = 0; j < (capacity + kRingBlock - 1) / kRingBlock; ++j) c->hi_view_.push_back(ring[j % ring.size()]);
  }
  const KvPolicy* pol = L.options().policy.get();
  for (int l = 0; l < L.n_layer(); ++l) {
    Seq& S = c->seq_[l];
    S.mu_k.assign(size_t(H) * d, 0.0f);
    S.mu_v.assign(size_t(H) * d, 0.0f);
    if (pol) {  // means from the calibration, from the first token on
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < d; ++i) {
          S.mu_k[h * d + i] = pol->k[l].heads[h].mean[i];
          S.mu_v[h * d + i] = pol->v[l].heads[h].mean[i];
        }
      S.centred = true;
    }
  }
  return c;
}

KvCache::~KvCache() {
  // Last block first: the prefix cache then evicts a chain from its tail,
  // keeping the shareable head longest.
  for (auto it = table_.rbegin(); it != table_.rend(); ++it) pool_->release(*it);
}


int KvCache::layer_slots(int layer) const {
  return layout_->window(layer) > 0 ? static_cast<int>(ring_.size()) * kRingBlock : capacity_;
}
size_t KvCache::k_bytes() const { return side_bytes(false); }
size_t KvCache::v_bytes() const { return side_bytes(true); }
size_t KvCache::side_bytes(bool v) const {
  size_t b = 0;
  const int hi_tokens = int(hi_sinks_.size() * kRingBlock) + layout_->protect_ring_tokens();
  for (int l = 0; l < n_layer(); ++l) {
    b += (v ? layout_->layer(l).v_row : layout_->layer(l).k_row) * size_t(n_kv_heads()) * layer_slots(l);
    if (layout_->protects(l)) {
      const LayerCodecs& h = layout_->protected_layout()->layer(l);
      b += (v ? h.v_row : h.k_row) * size_t(n_kv_heads()) * hi_tokens;
    }
  }
  return b;
}
size_t KvCache::state_bytes() const {
  size_t b = 0;
  for (const auto& s : state_) b += s.size() * sizeof(float);
  return b;
}
// With protected tokens, the real average over the capacity: the base rows
// plus the protected rows (sinks and the recent ring) spread over it.
double KvCache::k_bits_per_value() const { return side_bits(false); }
double KvCache::v_bits_per_value() const { return side_bits(true); }
double KvCache::side_bits(bool v) const {
  double s = 0;
  const int hi_tokens = int(hi_sinks_.size() * kRingBlock) + layout_->protect_ring_tokens();
  for (int l = 0; l < n_layer(); ++l) {
    s += (v ? layout_->layer(l).vc : layout_->layer(l).kc)[0]->bits_per_value();
    if (layout_->protects(l))
      s += (v ? layout_->protected_layout()->layer(l).vc : layout_->protected_layout()->layer(l).kc)[0]->bits_per_value() *
           hi_tokens / capacity_;
  }
  return s / n_layer();
}

// One addressing rule for writers and the attention kernels: KvRows::row.
// The buffers are the pool's (writable); KvRows only carries them as const.
uint8_t* KvCache::row(int layer, int t, int h, bool v) {
  const KvRows r = stored_rows(layer, v);
  return const_cast<uint8_t*>(r.row(t, h, r.token_stride, r.head_stride));
}

void KvCache::fix_mean(Seq& S, int n, const float* k, const float* v) {
  const int H = n_kv_heads(), d = head_dim();
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < d; ++i) {
      double sk = 0, sv = 0;
      for (int t = 0; t < n; ++t) {
        sk += k[(size_t(t) * H + h) * d + i];
        sv += v[(size_t(t) * H + h) * d + i];
      }
      S.mu_k[h * d + i] = static_cast<float>(sk / n);
      S.mu_v[h * d + i] = static_cast<float>(sv / n);
    }
  S.centred = true;
}

Status KvCache::quantize_rows(int layer, int pos, int n, const float* k, const float* v) {
  const int H = n_kv_heads(), d = head_dim();
  const LayerCodecs& L = layout_->layer(layer);
  const Seq& S = seq_[layer];
  std::vector<float> row(d);
  const LayerCodecs* hi = layout_->protects(layer) ? &layout_->protected_layout()->layer(layer) : nullptr;
  const int sinks = layout_->options().protect_sinks;
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) {
      const float* kr = k + (size_t(t) * H + h) * d;
      const float* vr = v + (size_t(t) * H + h) * d;
      for (int side = 0; side < 2; ++side) {  // K, then V, by one path
        const bool v_side = side == 1;
        const float* x = v_side ? vr : kr;
        const std::vector<float>& mu = v_side ? S.mu_v : S.mu_k;
        for (int i = 0; i < d; ++i) row[i] = x[i] - (S.centred ? mu[h * d + i] : 0.0f);
        const Codec* c = v_side ? L.v_codec(h) : L.k_codec(h);
        Status s = c->quantize(row.data(), 1, v_side ? v_row(layer, pos + t, h) : k_row(layer, pos + t, h));
        if (s.ok() && hi) {  // the protected rows: the recent ring always, the sinks while t < S
          const Codec* hc = v_side ? hi->v_codec(h) : hi->k_codec(h);
          if (!hi_view_.empty()) s = hc->quantize(row.data(), 1, hi_row(layer, pos + t, h, v_side, false));
          if (s.ok() && pos + t < sinks) s = hc->quantize(row.data(), 1, hi_row(layer, pos + t, h, v_side, true));
        }
        if (!s.ok())
          return Status::Error("layer " + std::to_string(layer) + (v_side ? " V" : " K") + ", token " +
                               std::to_string(pos + t) + ", head " + std::to_string(h) + ": " + s.message());
      }
    }
  return Status::Ok();
}

int KvCache::keepable_prefix(int n) const {
  n = std::max(0, std::min(n, n_tokens()));
  const int m = mean_rows();
  // Centred from rows 0..m-1: a prefix of fewer rows would need the means of
  // other tokens. Still staging: the f16 rows are exact, any prefix is fine.
  if (m > 0 && n < m && n_tokens() >= m) return 0;
  // A recurrent state holds every token up to n_tokens(): no earlier point.
  if (!state_.empty() && n != n_tokens()) return 0;
  // A ring keeps positions >= n_tokens() - its size; the tokens after a kept
  // prefix see the window's last rows before it.
  for (int l = 0; l < n_layer(); ++l)
    if (const int w = layout_->window(l); w > 0 && !seq_[l].staging)
      if (std::max(0, n - w + 1) < n_tokens() - layer_slots(l)) return 0;
  // The same for the protected recent tokens' ring.
  if (!hi_view_.empty() && !seq_[0].staging)
    if (std::max(0, n - options().protect_recent + 1) < n_tokens() - layout_->protect_ring_tokens()) return 0;
  return n;
}

Status KvCache::own_block(int index) {
  const int32_t b = pool_->make_writable(table_[index]);
  if (b < 0) return Status::Error("kv cache: no free block to copy a shared block into (KV pool exhausted)");
  table_[index] = b;
  return Status::Ok();
}

Status KvCache::truncate(int n) {
  if (n < 0 || n > n_tokens())
    return Status::Error("kv cache: cannot keep " + std::to_string(n) + " of " + std::to_string(n_tokens()) + " tokens");
  if (n > 0 && keepable_prefix(n) != n)
    return Status::Error("kv cache: a prefix of " + std::to_string(n) + " of " + std::to_string(n_tokens()) +
                         " tokens cannot be kept (the means were fixed from the first " + std::to_string(mean_rows()) +
                         ", a sliding window's ring has moved past it, or a recurrent state has)");
  const size_t keep = static_cast<size_t>(blocks_for(n));
  while (table_.size() > keep) {
    pool_->release(table_.back());
    table_.pop_back();
  }
  // The last kept block will be written again from position n on: it must
  // not be another sequence's (or the prefix cache's) any more.
  if (n % pool_->block_tokens() != 0)
    if (Status s = own_block(static_cast<int>(keep) - 1); !s.ok()) return s;
  if (n == 0)
    for (auto& st : state_) std::fill(st.begin(), st.end(), 0.0f);
  for (auto& S : seq_) {
    S.written = n;
    if (n == 0 && !options().policy) {  // back to an empty sequence: staging and means start again
      S.staging = false;
      S.centred = false;
      S.sk.clear();
      S.sv.clear();
    }
  }
  return Status::Ok();
}

Status KvCache::reserve(int n) {
  if (n > capacity_)
    return Status::Error("kv cache full: " + std::to_string(n) + " tokens > capacity " + std::to_string(capacity_) +
                         " (raise -c)");
  const size_t need = static_cast<size_t>(blocks_for(n));
  const size_t had = table_.size();
  while (table_.size() < need) {
    const int32_t b = pool_->allocate();
    if (b < 0) {
      const size_t missing = need - table_.size();
      while (table_.size() > had) {
        pool_->release(table_.back());
        table_.pop_back();
      }
      return Status::Error("KV pool exhausted: " + std::to_string(n) + " tokens need " + std::to_string(missing) +
                           " more blocks of " + std::to_string(pool_->block_tokens()) + " tokens, none is free");
    }
    table_.push_back(b);
  }
  return Status::Ok();
}

std::shared_ptr<const SequenceMeans> KvCache::means() const {
  auto m = std::make_shared<SequenceMeans>();
  for (const Seq& S : seq_) {
    m->k.push_back(S.centred ? S.mu_k : std::vector<float>());
    m->v.push_back(S.centred ? S.mu_v : std::vector<float>());
  }
  return m;
}

namespace {
// Shared or adopted blocks now hold a sequence's first n tokens (`seq`: its
// layers' states): the means they were centred with (m, the first block's;
// null: kept), staging over.
template <class Layers>
void take_shared(Layers& seq, const SequenceMeans* m, int n) {
  for (size_t l = 0; l < seq.size(); ++l) {
    auto& S = seq[l];
    if (m && !m->k[l].empty()) {
      S.mu_k = m->k[l];
      S.mu_v = m->v[l];
      S.centred = true;
    }
    S.staging = false;
    S.written = n;
  }
}
}  // namespace

int KvCache::share_prefix(const int32_t* tokens, int max_tokens, bool count) {
  if (n_tokens() != 0 || !table_.empty() || !shareable()) return 0;
  const int B = pool_->block_tokens();
  uint64_t key = 0;
  std::shared_ptr<const SequenceMeans> m;
  for (int k = 0; (k + 1) * B <= std::min(max_tokens, capacity_); ++k) {
    key = BlockPool::chain_hash(k == 1 ? key ^ means_key(m.get()) : key, tokens + size_t(k) * B, B);
    const int32_t b = pool_->lookup(key, tokens + size_t(k) * B, k == 0 ? &m : nullptr);
    if (b < 0) break;
    table_.push_back(b);
  }
  const int n = static_cast<int>(table_.size()) * B;
  const bool usable = n > 0 && n >= mean_rows() && m && m->k.size() == seq_.size();
  if (count) pool_->count_share(usable ? static_cast<int>(table_.size()) : 0);
  if (!usable) {
    for (int32_t b : table_) pool_->release(b);
    table_.clear();
    return 0;
  }
  take_shared(seq_, m.get(), n);
  return n;
}

Status KvCache::adopt_block(int32_t b, const SequenceMeans* m) {
  const int B = pool_->block_tokens();
  const int n = n_tokens();
  if (!shareable() || n % B != 0 || table_.size() != size_t(n / B) || n + B > capacity_)
    return Status::Error("adopt_block: the sequence does not end at a block boundary it can extend");
  for (const Seq& S : seq_)
    if (S.written != n || (n > 0 && S.staging)) return Status::Error("adopt_block: rows not final");
  if (n == 0) {
    if (!m || m->k.size() != seq_.size() || m->v.size() != seq_.size())
      return Status::Error("adopt_block: the first block needs the sequence's means");
    const size_t hd = size_t(n_kv_heads()) * head_dim();
    for (size_t l = 0; l < seq_.size(); ++l)
      if ((!m->k[l].empty() || !m->v[l].empty() || layout_->layer(l).mean_rows > 0 || seq_[l].centred) &&
          (m->k[l].size() != hd || m->v[l].size() != hd))
        return Status::Error("adopt_block: means missing or of the wrong size");
  }
  table_.push_back(b);
  take_shared(seq_, n == 0 ? m : nullptr, n + B);
  return Status::Ok();
}

void KvCache::publish(const int32_t* tokens) {
  if (!shareable()) return;  // (see share_prefix)
  for (const Seq& S : seq_)
    if (S.staging || S.written != n_tokens()) return;  // rows not final yet
  const int B = pool_->block_tokens(), full = n_tokens() / B;
  if (full == 0) return;
  const auto m = means();
  uint64_t key = 0;
  for (int k = 0; k < full; ++k) {
    key = BlockPool::chain_hash(k == 1 ? key ^ means_key(m.get()) : key, tokens + size_t(k) * B, B);
    pool_->publish(table_[k], key, tokens + size_t(k) * B, k == 0 ? m : nullptr);
  }
}

// The rows as given, or a copy with every row that holds NaN or Inf zeroed
// (the same for every format and for the staging area: it happens before
// either sees a row).
const float* KvCache::zero_nonfinite(int layer, int pos, int n, const float* x, bool v, std::vector<float>& copy) {
  const int H = n_kv_heads(), d = head_dim();
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) {
      const size_t at = (size_t(t) * H + h) * d;
      const float* r = (copy.empty() ? x : copy.data()) + at;
      bool finite = true;
      for (int i = 0; i < d; ++i) finite &= std::isfinite(r[i]);
      if (finite) continue;
      if (copy.empty()) copy.assign(x, x + size_t(n) * H * d);
      std::fill(copy.begin() + at, copy.begin() + at + d, 0.0f);
      if (nonfinite_.rows++ == 0) {
        nonfinite_.layer = layer;
        nonfinite_.head = h;
        nonfinite_.pos = pos + t;
        nonfinite_.v = v;
        std::fprintf(stderr,
                     "warning: layer %d, KV head %d, position %d: the %s row has NaN or Inf; stored as zeros "
                     "(later such rows are counted, not reported)\n",
                     layer, h, pos + t, v ? "V" : "K");
      }
    }
  return copy.empty() ? x : copy.data();
}

Status KvCache::append(int layer, int pos, int n, const float* k, const float* v) {
  if (layer < 0 || layer >= n_layer()) return Status::Error("kv cache: bad layer " + std::to_string(layer));
  Seq& S = seq_[layer];
  if (pos != S.written) return Status::Error("kv cache: layer " + std::to_string(layer) + " expects position " +
                                             std::to_string(S.written) + ", got " + std::to_string(pos));
  if (n < 1) return Status::Error("kv cache: nothing to append");
  if (const int step = layout_->append_step(layer); step > 0 && n > step)
    return Status::Error("kv cache: layer " + std::to_string(layer) + " keeps a ring (sliding window or protected "
                         "recent tokens); " + std::to_string(n) + " tokens at once is more than its ring allows (" +
                         std::to_string(step) + ")");
  if (Status s = reserve(pos + n); !s.ok()) return s;
  std::vector<float> k_copy, v_copy;
  k = zero_nonfinite(layer, pos, n, k, false, k_copy);
  v = zero_nonfinite(layer, pos, n, v, true, v_copy);
  const int H = n_kv_heads(), d = head_dim();
  const Codec& f16 = layout_->f16();
  const int M = layout_->layer(layer).mean_rows;
  if (pos == 0 && M > 0) {
    if (n >= M) {  // enough in the first batch: mu from its first M rows now
      fix_mean(S, M, k, v);
    } else {
      S.staging = true;
      S.sk.assign(size_t(H) * M * f16.row_bytes() + 64, 0);
      S.sv.assign(size_t(H) * M * f16.row_bytes() + 64, 0);
    }
  }
  if (S.staging) {
    const size_t rb = f16.row_bytes();
    for (int t = 0; t < n && pos + t < M; ++t)
      for (int h = 0; h < H; ++h) {
        Status s = f16.quantize(k + (size_t(t) * H + h) * d, 1, S.sk.data() + (size_t(h) * M + pos + t) * rb);
        if (s.ok()) s = f16.quantize(v + (size_t(t) * H + h) * d, 1, S.sv.data() + (size_t(h) * M + pos + t) * rb);
        if (!s.ok())
          return Status::Error("layer " + std::to_string(layer) + ", token " + std::to_string(pos + t) + ": " + s.message());
      }
    S.written = pos + n;
    if (S.written < M) return Status::Ok();
    // Enough rows seen: mu from the first M rows (the staged ones as the cache
    // holds them, in f16), then quantize all.
    const int total = S.written;
    std::vector<float> kall(size_t(total) * H * d), vall(kall.size());
    const int staged = std::min(pos, M);
    for (int t = 0; t < staged; ++t)
      for (int h = 0; h < H; ++h) {
        f16.dequantize(S.sk.data() + (size_t(h) * M + t) * rb, 1, &kall[(size_t(t) * H + h) * d]);
        f16.dequantize(S.sv.data() + (size_t(h) * M + t) * rb, 1, &vall[(size_t(t) * H + h) * d]);
      }
    std::copy(k, k + size_t(n) * H * d, kall.begin() + size_t(pos) * H * d);
    std::copy(v, v + size_t(n) * H * d, vall.begin() + size_t(pos) * H * d);
    fix_mean(S, M, kall.data(), vall.data());
    S.staging = false;
    S.sk.clear();
    S.sk.shrink_to_fit();
    S.sv.clear();
    S.sv.shrink_to_fit();
    return quantize_rows(layer, 0, total, kall.data(), vall.data());
  }
  Status s = quantize_rows(layer, pos, n, k, v);
  if (!s.ok()) return s;
  S.written = pos + n;
  return Status::Ok();
}

size_t KvCache::staging_bytes() const {
  size_t b = 0;
  for (const auto& S : seq_) b += S.sk.size() + S.sv.size();
  return b;
}

// K and V by one path: `v` picks the side.
KvRows KvCache::rows(int layer, bool v) const {
  const Seq& S = seq_[layer];
  if (S.staging) {
    const size_t rb = layout_->f16().row_bytes();
    return {&layout_->f16(), v ? S.sv.data() : S.sk.data(), rb, rb * layout_->layer(layer).mean_rows};
  }
  return stored_rows(layer, v);
}

// A layer's coded rows: the shared pool's blocks through the block table, or
// a window layer's ring through its view table.
KvRows KvCache::stored_rows(int layer, bool v) const {
  const LayerCodecs& L = layout_->layer(layer);
  const bool ring = layout_->window(layer) > 0;
  const BlockPool& P = ring ? *ring_pool_ : *pool_;
  const auto& codecs = v ? L.vp : L.kp;
  const size_t rb = v ? L.v_row : L.k_row;
  KvRows r{codecs[0], v ? P.v_base(layer) : P.k_base(layer), rb, rb * P.block_tokens(),
           codecs.size() > 1 ? codecs.data() : nullptr};
  r.blocks = ring ? ring_view_.data() : table_.data();
  r.block_shift = P.block_shift();
  r.block_bytes = v ? P.v_block_bytes(layer) : P.k_block_bytes(layer);
  r.end = v ? P.v_end(layer) : P.k_end(layer);
  return r;
}

}  // namespace tkv
