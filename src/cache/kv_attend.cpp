// A sequence's attention (KvCache::attend, attend_step): the views of its
// rows handed to the kernels, the protected rows (sinks and the recent ring)
// merged with the base-width rows, and the two-pass steps of window and
// protected layers that read a step's own rows as the cache will code them.
// Storage, truncation and prefix sharing are kv_cache.cpp's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cache/kv_cache.h"

namespace tkv {

uint8_t* KvCache::hi_row(int layer, int t, int h, bool v, bool sink) {
  const KvRows r = protected_rows(layer, v, sink);
  return const_cast<uint8_t*>(r.row(t, h, r.token_stride, r.head_stride));
}

KvRows KvCache::protected_rows(int layer, bool v, bool sinks) const {
  const BlockPool& P = *hi_pool_;
  const LayerCodecs& L = layout_->protected_layout()->layer(layer);
  const size_t rb = v ? L.v_row : L.k_row;
  KvRows r{(v ? L.vp : L.kp)[0], v ? P.v_base(layer) : P.k_base(layer), rb, rb * kRingBlock};
  r.blocks = sinks ? hi_sinks_.data() : hi_view_.data();
  r.block_shift = P.block_shift();
  r.block_bytes = v ? P.v_block_bytes(layer) : P.k_block_bytes(layer);
  r.end = v ? P.v_end(layer) : P.k_end(layer);
  return r;
}

Status KvCache::attend(int layer, AttentionArgs a) const {
  a.k = k_rows(layer);
  a.v = v_rows(layer);
  a.mu_k = mu_k(layer);
  a.mu_v = mu_v(layer);
  a.n_kv = layer_tokens(layer);
  // Staged rows are f16 already; a window layer keeps no old rows.
  if (!layout_->protects(layer) || seq_[layer].staging || a.window > 0 || a.causal_offset < 0) return attention(a);
  const int W = options().protect_recent;
  if (W == 0) return attend_protected(layer, a, nullptr);
  // The ring holds rows [n_kv - R, n_kv): the first query's window must start there.
  const int R = layout_->protect_ring_tokens(), first = a.causal_offset - W + 1;
  if (first > 0 && first < a.n_kv - R)
    return Status::Error("kv cache: layer " + std::to_string(layer) + ": the protected recent ring holds the last " +
                         std::to_string(R) + " rows; a query at position " + std::to_string(a.causal_offset) +
                         " needs row " + std::to_string(first) + " (append and attend in steps, attend_step)");
  AttentionArgs recent = a;  // keys [p - W + 1, p] at the protected width, from the recent ring
  recent.k = protected_rows(layer, false, false);
  recent.v = protected_rows(layer, true, false);
  recent.window = W;
  return attend_protected(layer, a, &recent);
}

// Three passes merged exactly: keys [0, S) and the recent window at the
// protected width, the keys between at the base width (a.k/a.v).
Status KvCache::attend_protected(int layer, const AttentionArgs& a, const AttentionArgs* recent) const {
  const KvCacheOptions& o = options();
  const int S = std::min(o.protect_sinks, a.n_kv), W = o.protect_recent;
  std::vector<AttentionArgs> parts;
  AttentionArgs sinks = a, middle = a;
  // Keys [0, S) at the protected width, before each query's recent window.
  sinks.k = protected_rows(layer, false, true);
  sinks.v = protected_rows(layer, true, true);
  sinks.n_kv = S;
  sinks.causal_lag = W;
  if (S > 0) parts.push_back(sinks);
  // Keys [S, p - W + 1) at the base width.
  middle.kv_begin = S;
  middle.causal_lag = W;
  parts.push_back(middle);
  if (recent) parts.push_back(*recent);
  return attention_merged(std::move(parts), a.out);
}

// A step of n > 1 tokens on a layer with protected recent tokens: its queries
// read the window's rows before the step from the ring as it is before the
// step, and the step's own rows as the ring codes them, from one scratch copy
// of rows [lo, pos + n): the ring then needs W rows, not W + n - 1 (at 512
// tokens 32 protected recent tokens cost 0.53 bits a value instead of 1.06).
Status KvCache::attend_step_protected(int layer, int pos, int n, const float* k, const float* v, AttentionArgs a) {
  const Seq& S = seq_[layer];
  const int W = options().protect_recent, H = n_kv_heads(), d = head_dim();
  const LayerCodecs& hi = layout_->protected_layout()->layer(layer);
  const size_t krb = hi.k_row, vrb = hi.v_row;
  const int lo = std::max(0, pos - W + 1), m = pos + n - lo;
  std::vector<uint8_t> kb(size_t(m) * H * krb + 64), vb(size_t(m) * H * vrb + 64);
  auto from_ring = [&](int t0, int t1) {
    for (int t = t0; t < t1; ++t)
      for (int h = 0; h < H; ++h) {
        std::memcpy(&kb[(size_t(t - lo) * H + h) * krb], hi_row(layer, t, h, false, false), krb);
        std::memcpy(&vb[(size_t(t - lo) * H + h) * vrb], hi_row(layer, t, h, true, false), vrb);
      }
  };
  // Rows [lo, pos): in the ring, or while the means are not fixed the staged
  // f16 rows, coded below once this step's append has fixed them (as append
  // codes the ring: centred, by the protected codec of the head).
  const bool staged = S.staging;
  std::vector<float> old_k, old_v;
  if (!staged) {
    from_ring(lo, pos);
  } else {
    const Codec& f16 = layout_->f16();
    const size_t rb = f16.row_bytes();
    const int M = layout_->layer(layer).mean_rows;
    old_k.resize(size_t(pos - lo) * H * d);
    old_v.resize(old_k.size());
    for (int t = lo; t < pos; ++t)
      for (int h = 0; h < H; ++h) {
        f16.dequantize(S.sk.data() + (size_t(h) * M + t) * rb, 1, &old_k[(size_t(t - lo) * H + h) * d]);
        f16.dequantize(S.sv.data() + (size_t(h) * M + t) * rb, 1, &old_v[(size_t(t - lo) * H + h) * d]);
      }
  }
  if (Status s = append(layer, pos, n, k, v); !s.ok()) return s;
  if (S.staging) return attend(layer, a);  // the first rows of a centred cache: still f16
  static_assert(kRingBlock >= kProtectStep, "the ring must hold a whole step's rows");
  from_ring(pos, pos + n);  // the ring holds at least a block, so the whole step
  if (staged) {
    std::vector<float> row(d);
    for (int t = lo; t < pos; ++t)
      for (int h = 0; h < H; ++h)
        for (int side = 0; side < 2; ++side) {
          const float* x = &(side ? old_v : old_k)[(size_t(t - lo) * H + h) * d];
          const std::vector<float>& mu = side ? S.mu_v : S.mu_k;
          for (int i = 0; i < d; ++i) row[i] = x[i] - (S.centred ? mu[h * d + i] : 0.0f);
          const Codec* c = side ? hi.v_codec(h) : hi.k_codec(h);
          uint8_t* dst = side ? &vb[(size_t(t - lo) * H + h) * vrb] : &kb[(size_t(t - lo) * H + h) * krb];
          if (Status st = c->quantize(row.data(), 1, dst); !st.ok())
            return Status::Error("layer " + std::to_string(layer) + (side ? " V" : " K") + ", token " +
                                 std::to_string(t) + ", head " + std::to_string(h) + ": " + st.message());
        }
  }
  AttentionArgs recent = a;
  recent.k = {hi.kp[0], kb.data(), H * krb, krb, hi.kp.size() > 1 ? hi.kp.data() : nullptr};
  recent.v = {hi.vp[0], vb.data(), H * vrb, vrb, hi.vp.size() > 1 ? hi.vp.data() : nullptr};
  recent.n_kv = m;
  recent.causal_offset = pos - lo;
  recent.window = W;
  a.k = k_rows(layer);
  a.v = v_rows(layer);
  a.n_kv = layer_tokens(layer);
  for (AttentionArgs* x : {&a, &recent}) {
    x->mu_k = mu_k(layer);
    x->mu_v = mu_v(layer);
  }
  return attend_protected(layer, a, &recent);
}

Status KvCache::attend_step(int layer, int pos, int n, const float* k, const float* v, AttentionArgs a) {
  const Seq& S = seq_[layer];
  const LayerCodecs& L = layout_->layer(layer);
  // Protected recent tokens: a step longer than one token whose queries read
  // the coded rows (not all staged: then attend reads the f16 staging area).
  if (layout_->protects(layer) && options().protect_recent > 0 && n > 1 && a.window == 0 && a.causal_offset == pos &&
      pos == S.written && n <= kProtectStep && !(S.staging && pos + n < L.mean_rows))
    return attend_step_protected(layer, pos, n, k, v, a);
  const bool two_pass = layout_->window(layer) > 0 && !S.staging && (L.mean_rows == 0 || S.centred) &&
                        pos == S.written && n <= kWindowStep;
  if (!two_pass) {
    if (Status s = append(layer, pos, n, k, v); !s.ok()) return s;
    return attend(layer, a);
  }
  // The step's rows coded as append will code them (zeroed if not finite,
  // centred), token-major in a scratch buffer.
  const int H = n_kv_heads(), d = head_dim();
  const size_t krb = L.k_row, vrb = L.v_row;
  std::vector<uint8_t> kbuf(size_t(n) * H * krb + 64), vbuf(size_t(n) * H * vrb + 64);
  std::vector<float> row(d);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h)
      for (int side = 0; side < 2; ++side) {
        const float* x = (side ? v : k) + (size_t(t) * H + h) * d;
        const std::vector<float>& mu = side ? S.mu_v : S.mu_k;
        bool finite = true;
        for (int i = 0; i < d; ++i) finite &= std::isfinite(x[i]);
        // A non-finite row is stored as zeros (append's rule), centred like any other.
        for (int i = 0; i < d; ++i) row[i] = (finite ? x[i] : 0.0f) - (S.centred ? mu[h * d + i] : 0.0f);
        const Codec* c = side ? L.v_codec(h) : L.k_codec(h);
        uint8_t* dst = side ? &vbuf[(size_t(t) * H + h) * vrb] : &kbuf[(size_t(t) * H + h) * krb];
        if (Status s = c->quantize(row.data(), 1, dst); !s.ok())
          return Status::Error("layer " + std::to_string(layer) + ", token " + std::to_string(pos + t) + ": " + s.message());
      }
  AttentionArgs old_rows = a, new_rows = a;
  old_rows.k = k_rows(layer);  // keys [p - W + 1, pos): the ring
  old_rows.v = v_rows(layer);
  old_rows.n_kv = pos;
  old_rows.causal_offset = pos;
  new_rows.k = {L.kp[0], kbuf.data(), H * krb, krb, L.kp.size() > 1 ? L.kp.data() : nullptr};
  new_rows.v = {L.vp[0], vbuf.data(), H * vrb, vrb, L.vp.size() > 1 ? L.vp.data() : nullptr};
  new_rows.n_kv = n;  // keys [max(pos, p - W + 1), p]: the step's own rows
  new_rows.causal_offset = 0;
  for (AttentionArgs* x : {&old_rows, &new_rows}) {
    x->mu_k = mu_k(layer);
    x->mu_v = mu_v(layer);
  }
  std::vector<AttentionArgs> parts;
  if (pos > 0) parts.push_back(old_rows);
  parts.push_back(new_rows);
  if (Status s = attention_merged(std::move(parts), a.out); !s.ok()) return s;
  return append(layer, pos, n, k, v);
}

}  // namespace tkv
