// A random attention problem for tests: n_kv rows of K and V coded in one
// format (contiguous), n_q queries, and the AttentionArgs reading them with a
// causal mask ending at the last key.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "codec/format.h"
#include "util/rng.h"

namespace tkv {

// An attention problem's shape: n_q queries of Hq heads over n_kv tokens of
// H KV heads, head dimension d.
inline void attention_shape(AttentionArgs& a, const float* q, int n_q, int Hq, int n_kv, int H, int d) {
  a.q = q;
  a.n_q = n_q;
  a.n_q_heads = Hq;
  a.n_kv = n_kv;
  a.n_kv_heads = H;
  a.d = d;
}

// AttentionArgs over contiguous rows ([token][KV head], H KV heads) of K and
// V: the shape and the two row sources; callers add masks, bases, threads.
inline AttentionArgs flat_args(const std::vector<float>& q, int n_q, int Hq, int n_kv, int H, int d, const Codec* ck,
                               const std::vector<uint8_t>& k, const Codec* cv, const std::vector<uint8_t>& v) {
  AttentionArgs a;
  attention_shape(a, q.data(), n_q, Hq, n_kv, H, d);
  a.k = {ck, k.data(), 0, 0};
  a.v = {cv, v.data(), 0, 0};
  return a;
}

struct AttnCase {
  std::unique_ptr<Codec> codec;
  std::vector<float> q;
  std::vector<uint8_t> k, v;
  AttentionArgs a;
  AttnCase(const std::string& fmt, int d, int H, int Hq, int n_kv, int n_q, Rng& rng) {
    codec = std::move(*make_codec(fmt, d));
    std::vector<float> x(size_t(n_kv) * H * d);
    q.resize(size_t(n_q) * Hq * d);
    for (float& e : q) e = static_cast<float>(rng.gaussian());
    k.assign(size_t(n_kv) * H * codec->row_bytes() + 64, 0);
    v.assign(k.size(), 0);
    for (auto* rows : {&k, &v}) {
      for (float& e : x) e = static_cast<float>(rng.gaussian());
      (void)codec->quantize(x.data(), size_t(n_kv) * H, rows->data());
    }
    attention_shape(a, q.data(), n_q, Hq, n_kv, H, d);
    a.k = {codec.get(), k.data()};
    a.v = {codec.get(), v.data()};
    a.causal_offset = n_kv - n_q;
    a.threads = 2;
  }
  size_t out_size() const { return q.size(); }
};

// The largest |x - y| over the largest |y|.
inline double max_rel(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e = std::max(e, std::abs(double(x[i]) - y[i]));
    m = std::max(m, std::abs(double(y[i])));
  }
  return e / m;
}

// max_rel of attention() against attention_ref() on a fresh AttnCase (1e30
// when either fails).
inline double fast_against_ref(const std::string& fmt, int d, int H, int Hq, int n_kv, int n_q, Rng& rng) {
  AttnCase c(fmt, d, H, Hq, n_kv, n_q, rng);
  std::vector<float> fast(c.out_size()), ref(c.out_size());
  AttentionArgs a = c.a, b = c.a;
  a.out = fast.data();
  b.out = ref.data();
  if (!attention(a).ok() || !attention_ref(b).ok()) return 1e30;
  return max_rel(fast, ref);
}

}  // namespace tkv
