// Attention driver: prepares queries (rotate into K's domain, scale), splits the
// work into (query tile, KV head, KV chunk) items run on OpenMP threads, merges
// the partial softmax states in a fixed order (results do not depend on the
// thread count), then rotates each output back from V's domain and adds mu_v.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <hwy/aligned_allocator.h>

#include "attention/attention.h"
#include "attention/kernel.h"
#include "util/env.h"
#include "codec/kernels.h"

namespace tkv {
namespace {

// Calls of up to this many query tokens score tq2 keys and sum tq2 values by
// pair tables (Int8Keys::lut, vlut; one attention tile).
constexpr int kLutMaxTokens = 16;

void init_reader(attn::RowReader& r, const Codec* c) {
  r.codec = c;
  r.layout = c->layout();
  r.d = c->dim();
  r.dp = padded(r.d);
  r.row_bytes = c->row_bytes();
  r.fast = attn::reader_fast_ok(r.layout, r.d);
  int covered = 0;
  for (int p = 0; p < r.layout.nparts; ++p) {
    std::memset(r.tables[p], 0, sizeof(r.tables[p]));
    const bool trellis = r.layout.kind == RowLayout::Kind::kTrellis;  // 64-entry window tables
    std::memcpy(r.tables[p], r.layout.parts[p].centroids,
                sizeof(float) * (trellis ? 64u : 1u << r.layout.parts[p].bits));
    covered += r.layout.parts[p].count;
  }
  // Coordinates no part covers, padding past d included, must decode to 0.
  r.gaps = (r.layout.kind == RowLayout::Kind::kTurbo || r.layout.kind == RowLayout::Kind::kTrellis) &&
           covered < r.dp;
  if (r.fast) {
    attn::reader_perm(r.layout, r.dp, r.perm);
  } else {
    for (int i = 0; i < r.dp; ++i) r.perm[i] = i;
  }
}

std::atomic<int> g_key_scoring{-1};  // -1: not read from the environment yet

KeyScoring resolve_keys(KeyScoring k) { return k == KeyScoring::kDefault ? key_scoring_default() : k; }

// Rows an item: depends only on n_kv and the layout, never on the thread
// count (the merge's order, and so the bits, follow the chunks).
// Token-major items read every head: n_kv / 16, 256 to 2048 rows.
// Head-major items read one head: n_kv · H / 64 (64 items a call once n_kv
// reaches 2048 rows a head), 256 to 8192 rows. Each item costs a fixed
// amount: its first block is nobody's prefetch, and its softmax state is
// merged serially. At 64K (8 KV heads, 2 threads) tq3 measured 3.35-3.46 ms
// a step on 2048 rows (256 items) against 3.15-3.22 on 8192 (64 items), f16
// the same (RESULTS §54); 16384 rows (32 items) measured no faster and
// noisier (a thread that the host slows leaves the other idle at the end
// for up to an item).
int chunk_rows(int n_kv, bool per_head, int heads) {
  if (!per_head) return std::clamp((n_kv / 16 + 31) / 32 * 32, 256, 2048);
  const int64_t rows = (static_cast<int64_t>(n_kv) * heads / 64 + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(rows, 256, 8192));
}

}  // namespace

namespace attn {
namespace {
// TKV_V_DROP_ZERO=0 in the environment starts with it off (for comparison).
std::atomic<bool> g_v_drop_zero{env_switch_on("TKV_V_DROP_ZERO")};
}
void set_v_drop_zero(bool on) { g_v_drop_zero.store(on); }
bool v_drop_zero() { return g_v_drop_zero.load(); }
}  // namespace attn

void set_key_scoring_default(KeyScoring k) {
  g_key_scoring = static_cast<int>(k == KeyScoring::kDefault ? KeyScoring::kInt8 : k);
}

KeyScoring key_scoring_default() {
  int v = g_key_scoring.load();
  if (v < 0) {
    const char* e = std::getenv("TKV_KEYS");
    v = static_cast<int>(e && std::strcmp(e, "exact") == 0 ? KeyScoring::kExact : KeyScoring::kInt8);
    g_key_scoring = v;
  }
  return static_cast<KeyScoring>(v);
}

bool int8_keys_available(const Codec& codec) {
  attn::Int8Keys k;
  attn::int8_keys_prepare(codec.layout(), codec.dim(), padded(codec.dim()), codec.coord_scale(), k);
  return k.usable && attn::int8_keys_cpu();
}

std::string int8_kernels() {
  switch (attn::int8_target()) {
    case attn::Int8Target::kAvx512: return "avx512";
    case attn::Int8Target::kAvx2: return "avx2";
    case attn::Int8Target::kNone: break;
  }
  return "none";
}

bool set_int8_kernels(const std::string& name) {
  if (name == "avx512") return attn::int8_set_target(attn::Int8Target::kAvx512);
  if (name == "avx2") return attn::int8_set_target(attn::Int8Target::kAvx2);
  if (name == "none") return attn::int8_set_target(attn::Int8Target::kNone);
  return false;
}

Status attention(const AttentionArgs& a) {
  Status st = check_attention_args(a);
  if (!st.ok()) return st;
  const int d = a.d, dp = padded(d), g = a.n_q_heads / a.n_kv_heads;
  const float scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  // One reader per distinct codec: per-head codecs (calibrated bases) get one
  // per KV head, and items then cover one head each.
  const int H = a.n_kv_heads;
  const bool multi = a.k.heads || a.v.heads;
  thread_local std::vector<attn::RowReader> kr_store, vr_store;
  kr_store.resize(a.k.heads ? H : 1);
  vr_store.resize(a.v.heads ? H : 1);
  const bool int8_keys = resolve_keys(a.keys) == KeyScoring::kInt8 && attn::int8_keys_cpu();
  // Diagnostics: TKV_INT8_PARTS=k or v limits the integer path to K or V (the
  // measurement of which side costs what; RESULTS §27).
  static const char* parts_env = std::getenv("TKV_INT8_PARTS");
  const bool int8_k = int8_keys && (!parts_env || std::strchr(parts_env, 'k'));
  const bool int8_v = int8_keys && (!parts_env || std::strchr(parts_env, 'v'));
  for (size_t h = 0; h < kr_store.size(); ++h) {
    attn::RowReader& r = kr_store[h];
    init_reader(r, a.k.head(static_cast<int>(h)));
    r.int8 = false;
    if (int8_k) {
      attn::int8_keys_prepare(r.layout, r.d, r.dp, r.codec->coord_scale(), r.i8);
      r.int8 = r.i8.usable;
      if (r.int8 && r.i8.residual) attn::int8_residual_table(r.i8, r.layout, r.i8r);
      // Pair tables for decode and short batches: 16 dp bytes a table, at
      // the q8 rows' places (two a query: 32 dp bytes; one tile of 16
      // tokens, 8 KV heads, GQA 4, d 128: 4 MiB); prefill tiles keep the
      // byte kernel (a 512-token call would hold 128 MiB of tables).
      if (a.n_q > kLutMaxTokens) r.i8.lut = false;
      r.i8_ordered = r.int8 && !r.i8.lut && attn::int8_query_order(r.i8, r.i8_order);
    }
  }
  for (size_t h = 0; h < vr_store.size(); ++h) {
    attn::RowReader& r = vr_store[h];
    init_reader(r, a.v.head(static_cast<int>(h)));
    r.int8 = false;
    if (int8_v) {  // V on int8 too: accumulators in the kernels' order (natural, or the lane kernels')
      attn::int8_keys_prepare(r.layout, r.d, r.dp, r.codec->coord_scale(), r.i8, attn::kInt8Residual, true,
                              attn::Int8Side::kValues);
      r.int8 = r.i8.usable;
      if (r.int8) attn::int8_values_order(r.i8, r.perm);
      // V's pair tables: 16 bytes a pair of rows and query, built per block
      // (no store across the call); prefill tiles keep the byte kernel, as K.
      if (a.n_q > kLutMaxTokens) r.i8.vlut = false;
    }
  }
  const attn::RowReader* Kr = kr_store.data();
  const attn::RowReader* Vr = vr_store.data();
  auto Kh = [&](int h) -> const attn::RowReader& { return Kr[a.k.heads ? h : 0]; };
  auto Vh = [&](int h) -> const attn::RowReader& { return Vr[a.v.heads ? h : 0]; };
  const attn::RowReader& K = Kr[0];
  const attn::RowReader& V = Vr[0];
  const size_t ks = a.k.token_stride ? a.k.token_stride : a.n_kv_heads * K.row_bytes;
  const size_t vs = a.v.token_stride ? a.v.token_stride : a.n_kv_heads * V.row_bytes;
  const size_t khs = a.k.head_stride ? a.k.head_stride : K.row_bytes;
  const size_t vhs = a.v.head_stride ? a.v.head_stride : V.row_bytes;
  const uint8_t* k_end = a.k.end ? a.k.end
                         : a.n_kv > 0 ? a.k.data + (a.n_kv - 1) * ks + (a.n_kv_heads - 1) * khs + K.row_bytes
                                      : a.k.data;
  const uint8_t* v_end = a.v.end ? a.v.end
                         : a.n_kv > 0 ? a.v.data + (a.n_kv - 1) * vs + (a.n_kv_heads - 1) * vhs + V.row_bytes
                                      : a.v.data;
  const attn::RowSource k_src{a.k.data, ks, khs, a.k.blocks, a.k.block_shift, a.k.block_bytes};
  const attn::RowSource v_src{a.v.data, vs, vhs, a.v.blocks, a.v.block_shift, a.v.block_bytes};
  // Token-major caches are streamed a block of tokens at a time for all heads;
  // head-major caches one head at a time (each item then reads one range).
  const bool per_head = khs > ks || vhs > vs || multi;

  // Dense rotations (tqc bases, dims without a Hadamard transform) cost d²
  // per query and per output row: spread those over the threads too.
  auto dense = [&](const KvRows& rows) {
    for (int h = 0; h < (rows.heads ? H : 1); ++h)
      if (const Rotation* R = rows.head(h)->rotation(); R && !R->hadamard()) return true;
    return false;
  };
  const int rot_threads = dense(a.k) || dense(a.v) ? a.threads : 1;

  // Tiles of query tokens share every decoded row; prefill uses 16 tokens a tile.
  const int tile = a.n_q == 1 ? 1 : std::min(16, a.n_q);
  const int n_tiles = (a.n_q + tile - 1) / tile;
  const int G_max = tile * g;

  // Queries in K's coding domain, pre-scaled: [n_q][n_q_heads][dp].
  hwy::AlignedFreeUniquePtr<float[]> qp = hwy::AllocateAligned<float>(static_cast<size_t>(a.n_q) * a.n_q_heads * dp);
  // The integer path's queries (heads whose K reader takes it), quantized
  // once per call: per tile t, [H][2 G_t][dp] at t · H · 2 G_max rows, rows
  // G_t .. 2 G_t − 1 of a head holding the residual bytes (Work::q8); natural
  // coordinate order (qp follows the f32 decoder's). Once per item, it was
  // 11 % of a 64K decode step.
  bool any_int8 = false;
  for (const attn::RowReader& r : kr_store) any_int8 = any_int8 || r.int8;
  thread_local std::vector<int8_t> q8_store;
  thread_local std::vector<float> q8s_store;
  thread_local std::vector<int32_t> q8b_store;
  const size_t q8_rows = any_int8 ? static_cast<size_t>(n_tiles) * H * 2 * G_max : 0;
  if (q8_store.size() < q8_rows * dp) q8_store.resize(q8_rows * dp);
  if (q8s_store.size() < q8_rows) q8s_store.resize(q8_rows);
  if (q8b_store.size() < q8_rows) q8b_store.resize(q8_rows);
  // The wide path's 16-bit queries (K readers with i8.wide), per tile t at
  // t · H · G_max rows: [H][G_t][dp].
  bool any_wide = false;
  for (const attn::RowReader& r : kr_store) any_wide = any_wide || (r.int8 && r.i8.wide);
  thread_local std::vector<int16_t> q16_store;
  const size_t q16_rows = any_wide ? static_cast<size_t>(n_tiles) * H * G_max : 0;
  if (q16_store.size() < q16_rows * dp) q16_store.resize(q16_rows * dp);
  int16_t* const q16_all = q16_store.data();
  // The pair tables (K readers with i8.lut), at the int8 rows' places.
  bool any_lut = false;
  for (const attn::RowReader& r : kr_store) any_lut = any_lut || (r.int8 && r.i8.lut);
  const size_t lut_bytes = attn::int8_lut_bytes(dp);
  thread_local hwy::AlignedFreeUniquePtr<uint8_t[]> lut_store;
  thread_local size_t lut_cap = 0;
  const size_t lut_need = any_lut ? q8_rows * lut_bytes : 0;
  if (lut_cap < lut_need) {
    lut_store = hwy::AllocateAligned<uint8_t>(lut_need);
    lut_cap = lut_need;
  }
  uint8_t* const lut_all = lut_store.get();
  int8_t* const q8_all = q8_store.data();
  float* const q8s_all = q8s_store.data();
  int32_t* const q8b_all = q8b_store.data();
#pragma omp parallel num_threads(rot_threads) if (rot_threads > 1)
  {
    std::vector<float> rot(static_cast<size_t>(g) * d);
    alignas(64) float nat[1024 + 16];
#pragma omp for schedule(static)
    for (int i = 0; i < a.n_q * H; ++i) {  // (query token, KV head): its g query heads
      const int h = i % H;
      const Codec* kc = a.k.head(h);
      const attn::RowReader& KR = Kh(h);
      const size_t first = static_cast<size_t>(i / H) * a.n_q_heads + static_cast<size_t>(h) * g;
      const float* q = a.q + first * d;
      if (const Rotation* R = kc->rotation()) {
        R->forward(q, rot.data(), Impl::kSimd, g);
      } else {
        std::memcpy(rot.data(), q, sizeof(float) * d * g);
      }
      const float* cs = kc->coord_scale();  // K rows decode to unscaled values: their coordinate scale goes here
      for (int j = 0; j < g; ++j) {
        const float* tmp = rot.data() + static_cast<size_t>(j) * d;
        float* dst = qp.get() + (first + j) * dp;
        // Position p of the kernel's K decode order holds coordinate perm[p].
        for (int c = 0; c < dp; ++c) {
          const int src = KR.perm[c];
          dst[c] = src < d ? tmp[src] * (cs ? cs[src] : 1.0f) * scale : 0.0f;
        }
        if (!KR.int8) continue;
        for (int c = 0; c < dp; ++c) nat[c] = c < d ? tmp[c] * (cs ? cs[c] : 1.0f) * scale : 0.0f;
        if (KR.i8_ordered) {  // the lane kernels' order (the quantizers are per coordinate and max |q|: order-free)
          alignas(64) float ord[1024 + 16];
          for (int c = 0; c < dp; ++c) ord[c] = nat[KR.i8_order[c]];
          std::memcpy(nat, ord, sizeof(float) * dp);
        }
        const int qi = i / H, t = qi / tile;
        const int G_t = (std::min(a.n_q, (t + 1) * tile) - t * tile) * g;
        const size_t row = static_cast<size_t>(t) * H * 2 * G_max + static_cast<size_t>(h) * 2 * G_t +
                           static_cast<size_t>(qi - t * tile) * g + j;
        if (KR.i8.lut) {
          q8s_all[row] = attn::int8_lut_build(KR.i8, nat, lut_all + row * lut_bytes, &q8b_all[row]);
          continue;
        }
        if (KR.i8.wide) {
          const size_t row16 = static_cast<size_t>(t) * H * G_max + static_cast<size_t>(h) * G_t +
                               static_cast<size_t>(qi - t * tile) * g + j;
          q8s_all[row] = attn::int8_quantize_query16(nat, dp, KR.i8.wmax, q16_all + row16 * dp);
          q8b_all[row] = 0;
          continue;
        }
        q8s_all[row] = attn::int8_quantize_query(nat, dp, q8_all + row * dp, &q8b_all[row]);
        if (KR.i8.residual)
          q8s_all[row + G_t] = attn::int8_quantize_residual(nat, dp, q8s_all[row], q8_all + row * dp,
                                                            q8_all + (row + G_t) * dp, &q8b_all[row + G_t]);
      }
    }
  }

  auto limit_of = [&](int i) {
    return a.causal_offset < 0 ? a.n_kv : std::clamp(a.causal_offset + i + 1 - a.causal_lag, 0, a.n_kv);
  };
  // The first visible token (a sliding window's lower edge; rows before it
  // are never read, so a ring may have overwritten them).
  auto start_of = [&](int i) {
    const int w = a.window > 0 ? a.causal_offset + i + 1 - a.window : 0;
    return std::clamp(std::max(w, a.kv_begin), 0, a.n_kv);
  };
  struct Item { int tile, h0, h1, r0, r1; };
  std::vector<Item> items;
  std::vector<size_t> first_item(n_tiles + 1, 0);
  const int chunk = chunk_rows(a.n_kv, per_head, H);
  for (int t = 0; t < n_tiles; ++t) {
    first_item[t] = items.size();
    const int rows = limit_of(std::min(a.n_q, (t + 1) * tile) - 1);
    for (int r0 = start_of(t * tile); r0 < rows; r0 += chunk)
      for (int h = 0; h < (per_head ? H : 1); ++h)
        items.push_back({t, per_head ? h : 0, per_head ? h + 1 : H, r0, std::min(rows, r0 + chunk)});
  }
  first_item[n_tiles] = items.size();
  // Partial softmax states: one slot per (item, head of the item, query).
  const size_t n_items = items.size(), heads_per_item = per_head ? 1 : H;
  const size_t per_item = heads_per_item * G_max;
  // Scratch reused across calls (per calling thread): fresh multi-MB buffers
  // would cost page faults on every decode step.
  thread_local hwy::AlignedFreeUniquePtr<float[]> acc_store;
  thread_local size_t acc_cap = 0;
  const size_t acc_need = std::max<size_t>(1, n_items * per_item * dp);
  if (acc_cap < acc_need) {
    acc_store = hwy::AllocateAligned<float>(acc_need);
    acc_cap = acc_need;
  }
  float* acc = acc_store.get();
  thread_local std::vector<float> m_store, l_store;
  m_store.resize(n_items * per_item);
  l_store.resize(n_items * per_item);
  // Plain pointers: inside the parallel region a thread_local name would mean
  // each worker's own (empty) instance.
  float* mbuf = m_store.data();
  float* lbuf = l_store.data();
  std::vector<uint64_t> skipped(n_items, 0), v_zero(n_items, 0), v_lut(n_items, 0);
  const bool drop_zero = attn::v_drop_zero();

#pragma omp parallel for schedule(dynamic, 1) num_threads(a.threads)
  for (size_t it = 0; it < n_items; ++it) {
    const Item& item = items[it];
    const int q0 = item.tile * tile, q1 = std::min(a.n_q, q0 + tile);
    const int G = (q1 - q0) * g;
    int limits[16 * 64], starts[16 * 64];
    // Queries of this tile per KV head: [H][G][dp], j = token-major, then head in group.
    thread_local hwy::AlignedFreeUniquePtr<float[]> qg_store;  // reused across items and calls
    thread_local size_t qg_cap = 0;
    const size_t qg_need = static_cast<size_t>(H) * G * dp;
    if (qg_cap < qg_need) {
      qg_store = hwy::AllocateAligned<float>(qg_need);
      qg_cap = qg_need;
    }
    float* qg = qg_store.get();
    for (int h = item.h0; h < item.h1; ++h)  // the item's heads only (Work::q is indexed by head)
      for (int i = q0; i < q1; ++i)
        for (int hq = 0; hq < g; ++hq) {
          const int j = (i - q0) * g + hq;
          std::memcpy(qg + (static_cast<size_t>(h) * G + j) * dp,
                      qp.get() + (static_cast<size_t>(i) * a.n_q_heads + h * g + hq) * dp, sizeof(float) * dp);
          limits[j] = limit_of(i);
          starts[j] = start_of(i);
        }
    attn::Work w;
    if (Kh(item.h0).int8) {
      const size_t base = static_cast<size_t>(item.tile) * H * 2 * G_max;
      w.q8 = q8_all + base * dp;
      w.q8_scale = q8s_all + base;
      w.q8_bias = q8b_all + base;
      w.q16 = q16_all + static_cast<size_t>(item.tile) * H * G_max * dp;
      if (lut_all) w.lut = lut_all + base * lut_bytes;
    }
    w.q = qg;
    w.limit = limits;
    w.start = starts;
    w.G = G;
    w.h0 = item.h0;
    w.h1 = item.h1;
    w.r0 = item.r0;
    w.r1 = item.r1;
    w.k = k_src;
    w.v = v_src;
    w.k_end = k_end;
    w.v_end = v_end;
    w.sparse_v = a.sparse_v;
    w.m = mbuf + it * per_item;
    w.l = lbuf + it * per_item;
    w.acc = acc + it * per_item * dp;
    w.skipped = &skipped[it];
    w.v_drop_zero = drop_zero;
    w.v_zero = &v_zero[it];
    w.v_lut = &v_lut[it];
    attn::run_work(Kh(item.h0), Vh(item.h0), w);
  }

  // Merge chunks (fixed order), normalise, rotate back, add mu_v: each
  // output row on its own, so the thread count changes nothing.
#pragma omp parallel num_threads(rot_threads) if (rot_threads > 1)
  {
  std::vector<double> o(dp);
  // The g query heads of (token, KV head) side by side, so one inverse
  // rotation call serves them all; rows with nothing visible are zero.
  std::vector<float> of(static_cast<size_t>(g) * d), res(static_cast<size_t>(g) * d);
  std::vector<char> empty(g);
  std::vector<float> row_lse(g);  // each query head's lse, for its sink
#pragma omp for schedule(static) collapse(2)
  for (int i = 0; i < a.n_q; ++i)
    for (int h = 0; h < H; ++h) {
      const int t = i / tile;
      const size_t b = first_item[t], e = first_item[t + 1];
      const int q0 = t * tile, q1 = std::min(a.n_q, q0 + tile);
      const int G = (q1 - q0) * g;
      const attn::RowReader& VR = Vh(h);
      const float* vsc = a.v.head(h)->coord_scale();
      for (int hq = 0; hq < g; ++hq) {
        // Slot within an item: (head - item.h0) * G + query.
        const size_t jq = static_cast<size_t>((i - q0) * g + hq);
        float m = -std::numeric_limits<float>::infinity();
        for (size_t it = b; it < e; ++it)
          if (h >= items[it].h0 && h < items[it].h1)
            m = std::max(m, mbuf[it * per_item + (h - items[it].h0) * G + jq]);
        float* ofq = of.data() + static_cast<size_t>(hq) * d;
        empty[hq] = m == -std::numeric_limits<float>::infinity();  // nothing visible
        float* lse = a.lse ? a.lse + static_cast<size_t>(i) * a.n_q_heads + h * g + hq : nullptr;
        if (lse) *lse = m;  // finished below once l is known
        row_lse[hq] = m;
        if (empty[hq]) {
          std::memset(ofq, 0, sizeof(float) * d);
          continue;
        }
        double l = 0;
        std::fill(o.begin(), o.end(), 0.0);
        for (size_t it = b; it < e; ++it) {
          if (h < items[it].h0 || h >= items[it].h1) continue;
          const size_t slot = it * per_item + (h - items[it].h0) * G + jq;
          const float mi = mbuf[slot];
          if (mi == -std::numeric_limits<float>::infinity()) continue;
          const double f = std::exp(static_cast<double>(mi) - m);
          l += f * lbuf[slot];
          const float* ai = acc + slot * dp;
          for (int c = 0; c < dp; ++c) o[c] += f * ai[c];
        }
        for (int c = 0; c < dp; ++c)
          if (VR.perm[c] < d) ofq[VR.perm[c]] = static_cast<float>(o[c] / l) * (vsc ? vsc[VR.perm[c]] : 1.0f);
        if (lse) *lse = static_cast<float>(m + std::log(l));
        row_lse[hq] = static_cast<float>(m + std::log(l));
      }
      if (const Rotation* R = a.v.head(h)->rotation()) {
        R->inverse(of.data(), res.data(), Impl::kSimd, g);
      } else {
        std::memcpy(res.data(), of.data(), sizeof(float) * d * g);
      }
      for (int hq = 0; hq < g; ++hq) {
        float* out = a.out + (static_cast<size_t>(i) * a.n_q_heads + h * g + hq) * d;
        const float* r = res.data() + static_cast<size_t>(hq) * d;
        for (int c = 0; c < d; ++c) out[c] = empty[hq] ? 0.0f : r[c] + (a.mu_v ? a.mu_v[h * d + c] : 0.0f);
        if (a.sinks && !empty[hq]) {  // the sink's share of the denominator, on the finished row (mu_v included)
          const size_t row = static_cast<size_t>(i) * a.n_q_heads + h * g + hq;
          float lse_row = row_lse[hq];
          apply_attention_sinks(out, &lse_row, a.sinks + h * g + hq, 1, 1, d);
          if (a.lse) a.lse[row] = lse_row;
        }
      }
    }
  }
  if (a.stats) {
    for (const Item& item : items) {
      a.stats->rows_scored += static_cast<uint64_t>(item.r1 - item.r0) * H;
      if (Kh(item.h0).int8) a.stats->rows_scored_int8 += static_cast<uint64_t>(item.r1 - item.r0) * H;
      if (Kh(item.h0).int8 && Kh(item.h0).i8.lut) a.stats->rows_scored_lut += static_cast<uint64_t>(item.r1 - item.r0) * H;
      if (Vh(item.h0).int8) a.stats->v_rows_int8 += static_cast<uint64_t>(item.r1 - item.r0) * H;
    }
    for (uint64_t s : skipped) a.stats->v_rows_skipped += s;
    for (uint64_t s : v_zero) a.stats->v_rows_zero += s;
    for (uint64_t s : v_lut) a.stats->v_rows_lut += s;
  }
  return Status::Ok();
}

void merge_attention(const float* const* outs, const float* const* lses, int parts, int n, int d, float* out) {
  for (int r = 0; r < n; ++r) {
    float m = -INFINITY;
    for (int p = 0; p < parts; ++p) m = std::max(m, lses[p][r]);
    float* o = out + static_cast<size_t>(r) * d;
    std::fill(o, o + d, 0.0f);
    if (m == -INFINITY) continue;
    double wsum = 0;
    double w[8];
    for (int p = 0; p < parts; ++p) wsum += (w[p] = lses[p][r] == -INFINITY ? 0.0 : std::exp(double(lses[p][r]) - m));
    for (int p = 0; p < parts; ++p)
      if (w[p] > 0)
        for (int c = 0; c < d; ++c) o[c] += static_cast<float>(w[p] / wsum) * outs[p][static_cast<size_t>(r) * d + c];
  }
}

void apply_attention_sinks(float* out, float* lse, const float* sinks, int n, int n_heads, int d) {
  for (int r = 0; r < n; ++r) {
    if (lse[r] == -INFINITY) continue;  // nothing visible: zeros stay
    const double s = sinks[r % n_heads], L = lse[r], mx = std::max(s, L);
    const double keys = std::exp(L - mx), sink = std::exp(s - mx);
    const float f = static_cast<float>(keys / (keys + sink));
    for (int c = 0; c < d; ++c) out[static_cast<size_t>(r) * d + c] *= f;
    lse[r] = static_cast<float>(mx + std::log(keys + sink));
  }
}

Status attention_merged(std::vector<AttentionArgs> parts, float* out) {
  if (parts.empty() || parts.size() > 8) return Status::Error("attention: 1 to 8 key ranges to merge");
  const AttentionArgs& a = parts[0];
  const size_t n_out = static_cast<size_t>(a.n_q) * a.n_q_heads;
  const float* sinks = a.sinks;  // once, after the merge: each part without
  for (AttentionArgs& p : parts) p.sinks = nullptr;
  std::vector<float> outs(parts.size() * n_out * a.d), lses(parts.size() * n_out);
  std::vector<const float*> op, lp;
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].out = &outs[i * n_out * a.d];
    parts[i].lse = &lses[i * n_out];
    op.push_back(parts[i].out);
    lp.push_back(parts[i].lse);
    if (Status s = attention(parts[i]); !s.ok()) return s;
  }
  merge_attention(op.data(), lp.data(), static_cast<int>(parts.size()), static_cast<int>(n_out), a.d, out);
  if (sinks) {  // the merged lse: log Σ_p e^(lse_p)
    std::vector<float> lse(n_out);
    for (size_t r = 0; r < n_out; ++r) {
      float m = -INFINITY;
      for (size_t i = 0; i < parts.size(); ++i) m = std::max(m, lses[i * n_out + r]);
      double sum = 0;
      if (m != -INFINITY)
        for (size_t i = 0; i < parts.size(); ++i)
          if (lses[i * n_out + r] != -INFINITY) sum += std::exp(double(lses[i * n_out + r]) - m);
      lse[r] = m == -INFINITY ? m : static_cast<float>(m + std::log(sum));
    }
    apply_attention_sinks(out, lse.data(), sinks, static_cast<int>(n_out), a.n_q_heads, a.d);
  }
  return Status::Ok();
}

}  // namespace tkv
