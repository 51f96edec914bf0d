// Fused attention on compressed rows: equals float64 attention over the
// dequantized rows (the kernel adds no error beyond the codes), equals the
// scalar reference, for every format pair, head dim, GQA ratio, length and
// causal offset, on every SIMD target; exact mean centring; thread invariance.
#include <gtest/gtest.h>

#include "exact_keys.h"

#include <cmath>
#include <map>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "attention/attention.h"
#include "codec/format.h"
#include "util/rng.h"
#include "util/simd_targets.h"
#include "attn_case.h"
#include "shared_data.h"
#include "simd_guard.h"

namespace tkv {
namespace {

struct Case {
  std::string fk, fv;
  int d = 128, n_kv = 100, n_q = 1, n_kv_heads = 2, gqa = 1, causal = -1;
  float bias = 0;        // constant added to every key (Qwen2-style key bias)
  bool center = false;   // store k - mu, v - mu
  int threads = 1;
  uint64_t seed = 1;
};

struct Built {
  std::unique_ptr<Codec> ck, cv;
  std::vector<float> q, k, v, mu_k, mu_v;
  std::vector<uint8_t> kq, vq;
  AttentionArgs args;
  std::vector<float> out;
};

std::unique_ptr<Built> build(const Case& c) {
  auto b = std::make_unique<Built>();
  Rng rng(c.seed);
  const int d = c.d, H = c.n_kv_heads, Hq = H * c.gqa;
  b->ck = std::move(*make_codec(c.fk, d, 11));
  b->cv = std::move(*make_codec(c.fv, d, 12));
  b->q.resize(size_t(c.n_q) * Hq * d);
  b->k.resize(size_t(c.n_kv) * H * d);
  b->v.resize(b->k.size());
  for (auto& x : b->q) x = float(rng.gaussian() * 2.0);
  for (auto& x : b->k) x = float(rng.gaussian());
  for (auto& x : b->v) x = float(rng.gaussian());
  if (c.bias != 0)
    for (size_t i = 0; i < b->k.size(); ++i) b->k[i] += c.bias * ((i % d) % 3 == 0 ? 1.0f : -0.5f);
  // Stored rows: (x - mu) if centring; mu from the first min(64, n) tokens.
  std::vector<float> ks = b->k, vs = b->v;
  if (c.center) {
    b->mu_k.assign(size_t(H) * d, 0.0f);
    b->mu_v.assign(size_t(H) * d, 0.0f);
    const int n0 = std::min(64, c.n_kv);
    for (int t = 0; t < n0; ++t)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < d; ++i) {
          b->mu_k[h * d + i] += b->k[(size_t(t) * H + h) * d + i] / n0;
          b->mu_v[h * d + i] += b->v[(size_t(t) * H + h) * d + i] / n0;
        }
    for (int t = 0; t < c.n_kv; ++t)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < d; ++i) {
          ks[(size_t(t) * H + h) * d + i] -= b->mu_k[h * d + i];
          vs[(size_t(t) * H + h) * d + i] -= b->mu_v[h * d + i];
        }
  }
  b->kq.resize(size_t(c.n_kv) * H * b->ck->row_bytes());
  b->vq.resize(size_t(c.n_kv) * H * b->cv->row_bytes());
  EXPECT_TRUE(b->ck->quantize(ks.data(), size_t(c.n_kv) * H, b->kq.data()).ok());
  EXPECT_TRUE(b->cv->quantize(vs.data(), size_t(c.n_kv) * H, b->vq.data()).ok());
  b->out.assign(b->q.size(), -1.0f);
  AttentionArgs& a = b->args;
  a.q = b->q.data();
  a.n_q = c.n_q;
  a.n_q_heads = Hq;
  a.n_kv = c.n_kv;
  a.n_kv_heads = H;
  a.d = d;
  a.k = {b->ck.get(), b->kq.data(), 0, 0};
  a.v = {b->cv.get(), b->vq.data(), 0, 0};
  a.causal_offset = c.causal;
  a.mu_k = c.center ? b->mu_k.data() : nullptr;
  a.mu_v = c.center ? b->mu_v.data() : nullptr;
  a.threads = c.threads;
  a.out = b->out.data();
  // The claim here is the exact path's (no error beyond the codes); int8
  // scoring has its own bounds (score_int8_test.cpp).
  a.keys = KeyScoring::kExact;
  return b;
}

// Float64 attention over given K/V rows in the original domain.
std::vector<double> attention_f64(const Case& c, const float* q, const std::vector<float>& K,
                                  const std::vector<float>& V) {
  const int d = c.d, H = c.n_kv_heads, Hq = H * c.gqa;
  std::vector<double> out(size_t(c.n_q) * Hq * d, 0.0);
  const double scale = 1.0 / std::sqrt(double(d));
  for (int i = 0; i < c.n_q; ++i)
    for (int hq = 0; hq < Hq; ++hq) {
      const int h = hq / c.gqa;
      const int lim = c.causal < 0 ? c.n_kv : std::min(c.n_kv, c.causal + i + 1);
      if (lim <= 0) continue;
      std::vector<double> s(lim);
      double mx = -1e300;
      for (int t = 0; t < lim; ++t) {
        double dot = 0;
        for (int x = 0; x < d; ++x) dot += double(q[(size_t(i) * Hq + hq) * d + x]) * K[(size_t(t) * H + h) * d + x];
        s[t] = dot * scale;
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int t = 0; t < lim; ++t)
        for (int x = 0; x < d; ++x)
          out[(size_t(i) * Hq + hq) * d + x] += s[t] / sum * V[(size_t(t) * H + h) * d + x];
    }
  return out;
}

std::vector<float> dequantized(const Codec& c, const std::vector<uint8_t>& rows, size_t n, const float* mu, int H) {
  const int d = c.dim();
  std::vector<float> x(n * d);
  c.dequantize(rows.data(), n, x.data(), Impl::kRef);
  if (mu)
    for (size_t r = 0; r < n; ++r)
      for (int i = 0; i < d; ++i) x[r * d + i] += mu[(r % H) * d + i];
  return x;
}

// Max over output rows of ||a - b|| / max(||b||, floor).
double max_rel_err(const std::vector<float>& a, const std::vector<double>& b, int d) {
  double worst = 0;
  for (size_t r = 0; r < b.size() / d; ++r) {
    double e = 0, n = 0;
    for (int i = 0; i < d; ++i) {
      e += std::pow(a[r * d + i] - b[r * d + i], 2);
      n += b[r * d + i] * b[r * d + i];
    }
    worst = std::max(worst, std::sqrt(e) / std::max(std::sqrt(n), 1e-3));
  }
  return worst;
}

void check_case(const Case& c, double tol = 1e-4) {
  auto b = build(c);
  ASSERT_TRUE(attention(b->args).ok());
  const size_t rows = size_t(c.n_kv) * c.n_kv_heads;
  auto K = dequantized(*b->ck, b->kq, rows, b->args.mu_k, c.n_kv_heads);
  auto V = dequantized(*b->cv, b->vq, rows, b->args.mu_v, c.n_kv_heads);
  auto exact = attention_f64(c, b->q.data(), K, V);
  const double err = max_rel_err(b->out, exact, c.d);
  EXPECT_LT(err, tol) << c.fk << "/" << c.fv << " d=" << c.d << " n_kv=" << c.n_kv << " n_q=" << c.n_q
                      << " gqa=" << c.gqa << " causal=" << c.causal << " threads=" << c.threads;
  // The scalar reference agrees too.
  std::vector<float> ref_out(b->out.size());
  AttentionArgs ra = b->args;
  ra.out = ref_out.data();
  ASSERT_TRUE(attention_ref(ra).ok());
  std::vector<double> ref_d(ref_out.begin(), ref_out.end());
  EXPECT_LT(max_rel_err(b->out, ref_d, c.d), tol) << c.fk << "/" << c.fv << " vs reference";
}

TEST(Attention, EveryFormatPairMatchesFloat64OverDecodedRows) {
  // Every (K, V) pair once, cycling through dims, GQA ratios, lengths and
  // causal offsets so all combinations of shape features are covered.
  const auto& names = all_format_names();
  const int dims[] = {64, 80, 96, 128, 256};
  const int gqas[] = {1, 2, 4, 8};
  const int lens[] = {1, 7, 33, 300, 777};
  int i = 0;
  for (const auto& fk : names)
    for (const auto& fv : names) {
      Case c;
      c.fk = fk;
      c.fv = fv;
      c.d = dims[i % 5];
      c.gqa = gqas[(i / 5) % 4];
      c.n_kv = lens[(i / 3) % 5];
      c.n_q = (i % 7 == 0) ? 9 : 1;
      c.causal = c.n_q > 1 ? c.n_kv - c.n_q : (i % 2 ? -1 : c.n_kv - 1);
      c.n_kv_heads = 1 + i % 2;
      c.seed = 1000 + i;
      check_case(c);
      ++i;
    }
}

TEST(Attention, AllDimsGqaAndLongContextOnEverySimdTarget) {
  TargetGuard guard;
  for (const auto& t : simd_targets()) {
    simd_force_target(t.bit);
    for (const char* f : {"f16", "q8_0", "q4_0r", "tq2", "tq3", "tq4", "tq4.5", "tq8"})
      for (int d : {64, 80, 96, 128, 256})
        for (int gqa : {1, 2, 4, 8}) {
          Case c;
          c.fk = c.fv = f;
          c.d = d;
          c.gqa = gqa;
          c.n_kv = (d == 128 && gqa == 4) ? 5000 : 130;
          c.seed = d * 10 + gqa;
          check_case(c);
        }
  }
}

TEST(Attention, PrefillTilesWithCausalOffsets) {
  for (int n_q : {1, 2, 8, 13, 64})
    for (int offset : {0, 5, 200}) {
      Case c;
      c.fk = "tq4";
      c.fv = "tq3";
      c.n_q = n_q;
      c.n_kv = offset + n_q;
      c.causal = offset;
      c.gqa = 4;
      c.threads = 2;
      c.seed = n_q * 100 + offset;
      check_case(c);
    }
  // Four queries over three rows with the mask: query 3 sees all three.
  Case c;
  c.fk = c.fv = "f16";
  c.n_q = 4;
  c.n_kv = 3;
  c.causal = 0;
  check_case(c);
}

// A query with no row to see (an empty cache: n_kv = 0, which is the only way
// the mask can hide every row, since causal_offset >= 0 shows query i rows
// 0..offset + i) outputs zeros, not NaN from 0/0, in the reference and the
// SIMD path, with or without row means (the mean of nothing is not added).
TEST(Attention, QueriesWithNothingToSeeOutputZeros) {
  for (const char* fmt : {"f16", "q8_0", "tq4"})
    for (bool with_mu : {false, true})
      for (int causal : {-1, 0, 5}) {
        SCOPED_TRACE(std::string(fmt) + " mu=" + std::to_string(with_mu) + " causal=" + std::to_string(causal));
        const int d = 64, H = 2, gqa = 2, n_q = 3;
        auto codec = *make_codec(fmt, d);
        std::vector<float> q(size_t(n_q) * H * gqa * d, 0.5f), mu(size_t(H) * d, 1.0f);
        std::vector<uint8_t> rows(64);  // never read
        AttentionArgs a = flat_args(q, n_q, H * gqa, 0, H, d, codec.get(), rows, codec.get(), rows);
        a.causal_offset = causal;
        if (with_mu) a.mu_k = a.mu_v = mu.data();
        for (int ref = 0; ref < 2; ++ref) {
          std::vector<float> out(q.size(), std::nanf(""));
          a.out = out.data();
          ASSERT_TRUE((ref ? attention_ref(a) : attention(a)).ok());
          for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 0.0f) << (ref ? "ref" : "simd") << " element " << i;
        }
      }
}

TEST(Attention, F32MatchesFloat64To1e5) {
  for (int d : {64, 80, 128, 256})
    for (int n_kv : {1, 50, 3000}) {
      Case c;
      c.fk = c.fv = "f32";
      c.d = d;
      c.n_kv = n_kv;
      c.gqa = 2;
      check_case(c, 1e-5);
    }
}

TEST(Attention, ThreadCountDoesNotChangeResults) {
  for (int n_kv : {1, 1000, 6000}) {
    Case c;
    c.fk = "tq4";
    c.fv = "q8_0";
    c.n_kv = n_kv;
    c.n_kv_heads = 1;
    c.gqa = 8;
    std::vector<float> first;
    for (int th : {1, 2, 7}) {
      c.threads = th;
      auto b = build(c);
      ASSERT_TRUE(attention(b->args).ok());
      if (first.empty()) first = b->out;
      for (size_t i = 0; i < first.size(); ++i) ASSERT_NEAR(b->out[i], first[i], 1e-6) << th;
    }
  }
}

// The same, bit for bit, on both item layouts (attention.cpp's chunk_rows):
// token-major items read every head, head-major ones (the block pool's
// layout) one head each, with 16 items a head at 9000 tokens and 4 heads;
// on the exact and the integer paths. The items' partial states are merged
// in a fixed order, so the bits follow the chunks, which must not follow
// the thread count.
TEST(Attention, ThreadCountChangesNoBitOnEitherLayout) {
  for (bool head_major : {false, true})
    for (KeyScoring keys : {KeyScoring::kExact, KeyScoring::kInt8}) {
      Case c;
      c.fk = c.fv = "tq3";
      c.n_kv = 9000;
      c.n_kv_heads = 4;
      c.gqa = 4;
      auto b = build(c);
      const int H = c.n_kv_heads;
      std::vector<uint8_t> khm, vhm;  // [head][token] copies of the token-major rows
      if (head_major) {
        auto to_head_major = [&](const std::vector<uint8_t>& tm, size_t rb, std::vector<uint8_t>& hm) {
          hm.resize(tm.size());
          for (int t = 0; t < c.n_kv; ++t)
            for (int h = 0; h < H; ++h)
              std::memcpy(&hm[(size_t(h) * c.n_kv + t) * rb], &tm[(size_t(t) * H + h) * rb], rb);
        };
        const size_t krb = b->ck->row_bytes(), vrb = b->cv->row_bytes();
        to_head_major(b->kq, krb, khm);
        to_head_major(b->vq, vrb, vhm);
        b->args.k = {b->ck.get(), khm.data(), krb, size_t(c.n_kv) * krb};
        b->args.v = {b->cv.get(), vhm.data(), vrb, size_t(c.n_kv) * vrb};
      }
      b->args.keys = keys;
      std::vector<float> first;
      for (int th : {1, 2, 7}) {
        b->args.threads = th;
        std::fill(b->out.begin(), b->out.end(), -1.0f);
        ASSERT_TRUE(attention(b->args).ok());
        if (first.empty()) {
          first = b->out;
          continue;
        }
        ASSERT_EQ(std::memcmp(first.data(), b->out.data(), sizeof(float) * first.size()), 0)
            << (head_major ? "head-major" : "token-major") << (keys == KeyScoring::kInt8 ? ", int8" : ", exact")
            << ", " << th << " threads";
      }
    }
}

TEST(Attention, MeanCentringMakesKeyBiasHarmless) {
  ExactKeys exact_path;  // the exact path's claim (int8 scoring: tests/attention/score_int8_test.cpp)
  // Keys carrying a constant bias 50x the rest: without centring the codec's
  // error scales with the bias; with centring accuracy matches unbiased keys.
  auto error_vs_exact = [](Case c) {
    auto b = build(c);
    EXPECT_TRUE(attention(b->args).ok());
    auto exact = attention_f64(c, b->q.data(), b->k, b->v);  // original, unquantized rows
    return max_rel_err(b->out, exact, c.d);
  };
  Case base;
  base.fk = base.fv = "tq4";
  base.n_kv = 500;
  base.gqa = 4;
  const double plain = error_vs_exact(base);
  Case biased = base;
  biased.bias = 50.0f / std::sqrt(0.5f);  // |bias vector| ~ 50 x |key|
  const double biased_plain = error_vs_exact(biased);
  biased.center = true;
  const double biased_centred = error_vs_exact(biased);
  std::printf("tq4 attention error: unbiased %.4f, biased %.4f, biased+centred %.4f\n", plain, biased_plain,
              biased_centred);
  EXPECT_GT(biased_plain, 3 * plain);
  EXPECT_LT(biased_centred, 1.3 * plain);
  // And with mu set, the kernel still equals float64 over the decoded rows.
  biased.fv = "tq3";
  check_case(biased);
}

TEST(Attention, SparseVSkipsOnlyNegligibleRows) {
  Case c;
  c.fk = "f32";
  c.fv = "tq4";
  c.n_kv = 4000;
  auto b = build(c);
  for (auto& x : b->q) x *= 3.0f;  // peaky softmax: most weights tiny
  AttnStats st;
  b->args.stats = &st;
  b->args.sparse_v = 1e-6f;
  ASSERT_TRUE(attention(b->args).ok());
  std::vector<float> dense(b->out.size());
  AttentionArgs a2 = b->args;
  a2.out = dense.data();
  a2.sparse_v = 0;
  a2.stats = nullptr;
  ASSERT_TRUE(attention(a2).ok());
  EXPECT_GT(st.v_rows_skipped, 0u);
  EXPECT_EQ(st.rows_scored, uint64_t(c.n_kv) * c.n_kv_heads);
  double e = 0, n = 0;
  for (size_t i = 0; i < dense.size(); ++i) { e += std::pow(dense[i] - b->out[i], 2); n += dense[i] * dense[i]; }
  EXPECT_LT(std::sqrt(e / n), 1e-4);
}

TEST(Attention, HeadMajorLayoutGivesTheSameResult) {
  ExactKeys exact_path;  // the exact path's claim (int8 scoring: tests/attention/score_int8_test.cpp)
  for (const char* f : {"f16", "q8_0", "tq4", "tq3"}) {
    Case c;
    c.fk = c.fv = f;
    c.n_kv = 700;
    c.n_kv_heads = 3;
    c.gqa = 2;
    c.threads = 2;
    auto b = build(c);
    ASSERT_TRUE(attention(b->args).ok());
    // Re-lay the rows head-major with spare capacity: [head][capacity].
    const int cap = c.n_kv + 5, H = c.n_kv_heads;
    const size_t kb = b->ck->row_bytes(), vb = b->cv->row_bytes();
    std::vector<uint8_t> kh(size_t(H) * cap * kb + 16), vh(size_t(H) * cap * vb + 16);
    for (int t = 0; t < c.n_kv; ++t)
      for (int h = 0; h < H; ++h) {
        std::memcpy(&kh[(size_t(h) * cap + t) * kb], &b->kq[(size_t(t) * H + h) * kb], kb);
        std::memcpy(&vh[(size_t(h) * cap + t) * vb], &b->vq[(size_t(t) * H + h) * vb], vb);
      }
    std::vector<float> out(b->out.size());
    AttentionArgs a = b->args;
    a.k = {b->ck.get(), kh.data(), kb, cap * kb};
    a.v = {b->cv.get(), vh.data(), vb, cap * vb};
    a.out = out.data();
    ASSERT_TRUE(attention(a).ok());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], b->out[i], 1e-6) << f;
    std::vector<float> ref(out.size());
    a.out = ref.data();
    ASSERT_TRUE(attention_ref(a).ok());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << f;
  }
}

TEST(Attention, BadArgumentsAreErrors) {
  Case c;
  c.fk = c.fv = "tq4";
  auto b = build(c);
  AttentionArgs a = b->args;
  a.n_q_heads = 3;
  auto s = attention(a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("multiple"), std::string::npos) << s.message();
  a = b->args;
  a.d = 64;
  EXPECT_FALSE(attention(a).ok());
  a = b->args;
  a.threads = 0;
  EXPECT_FALSE(attention(a).ok());
  a = b->args;
  a.q = nullptr;
  EXPECT_FALSE(attention(a).ok());
}

// Real Qwen3.5 keys/values: attention-output error per format for random queries.
TEST(Attention, RealDataErrorPerFormat) {
  TKV_NEED_SHARED("data/kv/qwen3.5-0.8b/layer3_keys.bin", "data/kv/qwen3.5-0.8b/layer3_values.bin",
                  "data/kv/qwen3.5-0.8b/layer7_keys.bin", "data/kv/qwen3.5-0.8b/layer7_values.bin");
  const std::string dir = std::string(TKV_SHARED_DIR) + "/data/kv/qwen3.5-0.8b/";
  auto load = [](const std::string& path, std::vector<float>& x, uint32_t* hdr) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    f.read(reinterpret_cast<char*>(hdr), 20);
    x.resize(size_t(hdr[2]) * hdr[3] * hdr[4]);
    f.read(reinterpret_cast<char*>(x.data()), x.size() * 4);
    return bool(f);
  };
  for (int layer : {3, 7}) {
    std::vector<float> kf, vf;
    uint32_t hk[5], hv[5];
    const std::string kp = dir + "layer" + std::to_string(layer) + "_keys.bin";
    ASSERT_TRUE(load(kp, kf, hk) && load(dir + "layer" + std::to_string(layer) + "_values.bin", vf, hv)) << kp;
    const int H = hk[2], T = hk[3], d = hk[4];
    // [head][token][dim] -> [token][head][dim]
    std::vector<float> K(kf.size()), V(vf.size());
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < d; ++i) {
          K[(size_t(t) * H + h) * d + i] = kf[(size_t(h) * T + t) * d + i];
          V[(size_t(t) * H + h) * d + i] = vf[(size_t(h) * T + t) * d + i];
        }
    // Queries: Gaussian with each key channel's RMS (so scores have the keys' scale).
    Rng rng(77);
    const int gqa = 4, nq = 8;
    std::vector<float> q(size_t(nq) * H * gqa * d);
    std::vector<double> rms(d, 0);
    for (size_t r = 0; r < K.size() / d; ++r)
      for (int i = 0; i < d; ++i) rms[i] += double(K[r * d + i]) * K[r * d + i] / (K.size() / d);
    for (size_t j = 0; j < q.size(); ++j) q[j] = float(rng.gaussian() * std::sqrt(rms[j % d]) / 4);
    Case c;
    c.d = d;
    c.n_kv = T;
    c.n_q = nq;
    c.n_kv_heads = H;
    c.gqa = gqa;
    auto exact = attention_f64(c, q.data(), K, V);
    std::printf("layer %d attention-output relative error (%d queries x %d heads, %d tokens):\n", layer, nq,
                H * gqa, T);
    // Each format's bound: 1.25x the larger of its two layers' errors as
    // measured on 2026-12-01 (f16's, below 5e-6, gets 2e-5) (the data and queries are fixed, and every SIMD
    // target gives the same bits), so a codec that gets worse fails here.
    const std::vector<std::pair<const char*, double>> bounds = {
        {"f16", 2e-5},      {"q8_0", 0.0022},   {"q4_0", 0.031},    {"q4_0r", 0.022},   {"tq2", 0.203},
        {"tq2.5", 0.174},   {"tq3", 0.080},     {"tq3.5", 0.073},   {"tq4", 0.0332},    {"tq4.5", 0.0296},
        {"tq2-nc", 0.163},  {"tq3-nc", 0.0707}, {"tq4-nc", 0.0304}, {"tq4.5-nc", 0.0276}, {"tq2-ip", 0.155},
        {"tq3-ip", 0.0682}, {"tq4-ip", 0.0298}, {"tq4.5-ip", 0.0273}};
    std::map<std::string, double> err;
    for (const auto& [f, bound] : bounds) {
      auto ck = *make_codec(f, d), cv = *make_codec(f, d);
      std::vector<uint8_t> kq(size_t(T) * H * ck->row_bytes()), vq(kq.size());
      ASSERT_TRUE(ck->quantize(K.data(), size_t(T) * H, kq.data()).ok());
      ASSERT_TRUE(cv->quantize(V.data(), size_t(T) * H, vq.data()).ok());
      std::vector<float> out(q.size());
      AttentionArgs a = flat_args(q, nq, H * gqa, T, H, d, ck.get(), kq, cv.get(), vq);
      a.out = out.data();
      ASSERT_TRUE(attention(a).ok());
      double e = 0, n = 0;
      for (size_t i = 0; i < out.size(); ++i) { e += std::pow(out[i] - exact[i], 2); n += exact[i] * exact[i]; }
      std::printf("  %-6s %6.3f bits/value  rel err %.6f\n", f, ck->bits_per_value(), std::sqrt(e / n));
      EXPECT_LT(std::sqrt(e / n), bound) << f;
      err[f] = std::sqrt(e / n);
    }
    // RESULTS §13's claim, asserted: the -nc and -ip norms beat the plain
    // norm at every width on both layers (same bits).
    for (const std::string w : {"tq2", "tq3", "tq4", "tq4.5"}) {
      if (err.count(w + "-nc")) {
        EXPECT_LT(err[w + "-nc"], err[w]) << w << "-nc, layer " << layer;
      }
      if (err.count(w + "-ip")) {
        EXPECT_LT(err[w + "-ip"], err[w]) << w << "-ip, layer " << layer;
      }
    }
  }
}

}  // namespace
}  // namespace tkv
