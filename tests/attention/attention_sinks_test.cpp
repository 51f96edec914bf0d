// Attention sinks (issue 32, gpt-oss): a per-head logit that joins the
// softmax denominator with no value. attention(), attention_ref() and
// attention_merged() (the cache's split key ranges) against a float64
// softmax with the sink written here, on f32 and tq4 rows, windows, several
// query tiles and GQA groups.
#include <gtest/gtest.h>

#include "exact_keys.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attn_case.h"
#include "util/rng.h"

namespace tkv {
namespace sinks_test {

// out[i][hq] = Σ_j e^(s_j) v_j / (Σ_j e^(s_j) + e^(sink[hq])) over the keys
// query i sees (causal, window), rows decoded by the codec.
std::vector<double> reference(const AttnCase& c, const std::vector<float>& sinks) {
  const AttentionArgs& a = c.a;
  const int d = a.d, g = a.n_q_heads / a.n_kv_heads;
  const size_t rb = c.codec->row_bytes();
  std::vector<float> K(size_t(a.n_kv) * a.n_kv_heads * d), V(K.size());
  c.codec->dequantize(c.k.data(), size_t(a.n_kv) * a.n_kv_heads, K.data(), Impl::kRef);
  c.codec->dequantize(c.v.data(), size_t(a.n_kv) * a.n_kv_heads, V.data(), Impl::kRef);
  (void)rb;
  std::vector<double> out(size_t(a.n_q) * a.n_q_heads * d, 0.0);
  for (int i = 0; i < a.n_q; ++i)
    for (int hq = 0; hq < a.n_q_heads; ++hq) {
      const int h = hq / g, last = a.causal_offset + i;
      const int first = a.window > 0 ? std::max(0, last - a.window + 1) : 0;
      std::vector<double> s;
      double mx = sinks[hq];
      for (int j = first; j <= last; ++j) {
        double dot = 0;
        for (int k = 0; k < d; ++k) dot += double(a.q[(size_t(i) * a.n_q_heads + hq) * d + k]) * K[(size_t(j) * a.n_kv_heads + h) * d + k];
        s.push_back(dot / std::sqrt(double(d)));
        mx = std::max(mx, s.back());
      }
      double den = std::exp(sinks[hq] - mx);
      for (double& v : s) den += (v = std::exp(v - mx));
      for (int j = first; j <= last; ++j)
        for (int k = 0; k < d; ++k)
          out[(size_t(i) * a.n_q_heads + hq) * d + k] += s[j - first] / den * V[(size_t(j) * a.n_kv_heads + h) * d + k];
    }
  return out;
}

double rel(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    e = std::max(e, std::abs(got[i] - want[i]));
    m = std::max(m, std::abs(want[i]));
  }
  return e / m;
}

TEST(AttentionSinks, EveryPathMatchesFloat64SoftmaxWithTheSink) {
  ExactKeys exact_path;  // the exact path's claim (int8 scoring: tests/attention/score_int8_test.cpp)
  Rng rng(77);
  for (const char* fmt : {"f32", "tq4"})
    for (int window : {0, 7})
      for (int n_q : {1, 21}) {
        AttnCase c(fmt, 64, 2, 6, 50, n_q, rng);
        c.a.window = window;
        // Sinks from well below to well above the scores: from no effect to most of the mass.
        std::vector<float> sinks = {-8.0f, -1.0f, 0.0f, 1.5f, 3.0f, 6.0f};
        c.a.sinks = sinks.data();
        const auto want = reference(c, sinks);
        std::vector<float> fast(c.out_size()), ref(c.out_size()), merged(c.out_size());
        AttentionArgs a = c.a;
        a.out = fast.data();
        ASSERT_TRUE(attention(a).ok());
        a.out = ref.data();
        ASSERT_TRUE(attention_ref(a).ok());
        // Two key ranges merged (as the cache's protected rows are read).
        std::vector<AttentionArgs> parts(2, c.a);
        parts[0].causal_lag = 0;
        parts[0].kv_begin = 20;
        parts[1].n_kv = 20;
        ASSERT_TRUE(attention_merged(parts, merged.data()).ok());
        const double tol = std::string(fmt) == "f32" ? 1e-5 : 1e-4;
        EXPECT_LT(rel(fast, want), tol) << fmt << " window " << window << " queries " << n_q;
        EXPECT_LT(rel(ref, want), 1e-6) << fmt << " window " << window << " queries " << n_q;
        EXPECT_LT(rel(merged, want), tol) << fmt << " window " << window << " queries " << n_q;
        // The sinks matter here: without them the outputs are far off.
        std::vector<float> plain(c.out_size());
        a.sinks = nullptr;
        a.out = plain.data();
        ASSERT_TRUE(attention(a).ok());
        EXPECT_GT(rel(plain, want), 0.05);
      }
}

TEST(AttentionSinks, NonFiniteSinkIsRefusedNamingTheHead) {
  Rng rng(3);
  AttnCase c("f32", 64, 1, 2, 8, 1, rng);
  std::vector<float> sinks = {0.0f, std::numeric_limits<float>::quiet_NaN()}, out(c.out_size());
  c.a.sinks = sinks.data();
  c.a.out = out.data();
  const Status s = attention(c.a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("attention sink of head 1 is not finite"), std::string::npos) << s.message();
}

}  // namespace sinks_test
}  // namespace tkv
