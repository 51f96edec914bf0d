// The CUDA backend (src/cuda/). On a machine without a GPU (or a build
// without nvcc) the GPU checks are skipped with the reason, and ctest reports
// them as not run (SKIP_REGULAR_EXPRESSION in CMakeLists.txt), never as
// passed; what can be checked without a GPU is: the calls fail with that
// reason instead of crashing, and the row programs the kernels run equal the
// codec (tests/codec/flat_codec_test.cpp). scripts/cuda-check.sh runs these on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "codec/calibrated.h"
#include "codec/format.h"
#include "cuda/cuda_backend.h"
#include "attn_case.h"
#include "util/rng.h"

namespace tkv {
namespace {

#define REQUIRE_GPU()                                   \
  do {                                                  \
    std::string why_;                                   \
    if (!cuda::available(&why_)) GTEST_SKIP() << why_;  \
  } while (0)

TEST(Cuda, WithoutADeviceEveryCallSaysWhy) {
  std::string why;
  if (cuda::available(&why)) GTEST_SKIP() << "a CUDA device is present: the GPU tests below run instead";
  EXPECT_FALSE(why.empty());
  auto codec = std::move(*make_codec("tq4", 64));
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> out(codec->row_bytes());
  const Status s = cuda::quantize(*codec, x.data(), 1, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("CUDA"), std::string::npos) << s.message();
  Rng rng(1);
  AttnCase c("tq4", 64, 2, 4, 10, 1, rng);
  std::vector<float> o(c.out_size());
  c.a.out = o.data();
  EXPECT_FALSE(cuda::attention(c.a).ok());
  EXPECT_FALSE(cuda::copy_bandwidth_gbs().ok());
}

std::unique_ptr<Codec> gpu_codec(const std::string& fmt, int d, int head = 0) {
  if (fmt.rfind("tqc", 0) == 0) return std::move(*make_calibrated_codec(fmt, synthetic_head_basis(d, 100 + head)));
  return std::move(*make_codec(fmt, d));
}

TEST(Cuda, QuantizeWritesTheCpuBytesForEveryFormatAndHeadDim) {
  REQUIRE_GPU();
  std::vector<std::string> formats = all_format_names();
  for (const char* f : {"tq1.5", "tq5.5", "tq7.5", "tq6-ip", "tqc1.5", "tqc2", "tqc3", "tqc4"}) formats.push_back(f);
  Rng rng(17);
  for (int d : {64, 80, 96, 128, 256})
    for (const std::string& fmt : formats) {
      auto codec = gpu_codec(fmt, d);
      const size_t n = 1000;
      std::vector<float> x(n * d);
      for (size_t r = 0; r < n; ++r)
        for (int i = 0; i < d; ++i) x[r * d + i] = static_cast<float>(rng.gaussian() * std::pow(10.0, int(r % 7) - 3));
      std::fill(x.begin(), x.begin() + d, 0.0f);  // a zero row
      std::vector<uint8_t> cpu(n * codec->row_bytes()), gpu(cpu.size(), 0xCD);
      ASSERT_TRUE(codec->quantize(x.data(), n, cpu.data()).ok());
      const Status s = cuda::quantize(*codec, x.data(), n, gpu.data());
      ASSERT_TRUE(s.ok()) << s.message();
      for (size_t r = 0; r < n; ++r)
        ASSERT_EQ(0, std::memcmp(&cpu[r * codec->row_bytes()], &gpu[r * codec->row_bytes()], codec->row_bytes()))
            << fmt << " d=" << d << " row " << r;
    }
}

TEST(Cuda, QuantizeNamesTheBadRow) {
  REQUIRE_GPU();
  auto codec = gpu_codec("tq3", 128);
  std::vector<float> x(5 * 128, 0.5f);
  x[3 * 128 + 9] = NAN;
  std::vector<uint8_t> out(5 * codec->row_bytes());
  const Status s = cuda::quantize(*codec, x.data(), 5, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("row 3: element 9"), std::string::npos) << s.message();
}

// GPU attention against the float64 reference, as the CPU kernel is checked.
void expect_matches_reference(const AttentionArgs& a, const std::string& what, double tol = 1e-4) {
  const size_t n = static_cast<size_t>(a.n_q) * a.n_q_heads * a.d;
  const size_t nl = static_cast<size_t>(a.n_q) * a.n_q_heads;
  std::vector<float> want(n), got(n, NAN), lse_want(nl), lse_got(nl, NAN);
  AttentionArgs r = a, g = a;
  r.out = want.data();
  g.out = got.data();
  r.lse = lse_want.data();
  g.lse = lse_got.data();
  ASSERT_TRUE(attention_ref(r).ok());
  const Status s = cuda::attention(g);
  ASSERT_TRUE(s.ok()) << what << ": " << s.message();
  EXPECT_LT(max_rel(got, want), tol) << what;
  for (size_t i = 0; i < nl; ++i) {
    if (std::isinf(lse_want[i])) { EXPECT_TRUE(std::isinf(lse_got[i])) << what; continue; }
    EXPECT_NEAR(lse_got[i], lse_want[i], 1e-4 * (1 + std::abs(lse_want[i]))) << what << " lse " << i;
  }
}

TEST(Cuda, AttentionMatchesTheReferenceForFormatPairsGroupsAndContexts) {
  REQUIRE_GPU();
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"f16", "f16"}, {"f32", "bf16"}, {"q8_0", "q8_0"}, {"q4_0r", "q4_0r"}, {"q8_0r", "q4_0"},
      {"tq4", "tq4"}, {"tq3", "tq3"}, {"tq2.5", "tq4-ip"}, {"tq8", "tq1"}, {"tq3.5-nc", "tq2"}};
  Rng rng(5);
  for (int d : {64, 80, 96, 128, 256})
    for (const auto& [fk, fv] : pairs)
      for (int g : {1, 2, 4, 8})
        for (int n_kv : {1, 7, 100, 1000}) {
          for (int n_q : {1, std::min(n_kv, 33)}) {
            const int H = 2;
            AttnCase c(fk, d, H, H * g, n_kv, n_q, rng);
            auto vc = gpu_codec(fv, d);
            std::vector<float> x(size_t(n_kv) * H * d);
            for (float& e : x) e = static_cast<float>(rng.gaussian());
            c.v.assign(size_t(n_kv) * H * vc->row_bytes() + 64, 0);
            ASSERT_TRUE(vc->quantize(x.data(), size_t(n_kv) * H, c.v.data()).ok());
            c.a.v = {vc.get(), c.v.data()};
            expect_matches_reference(c.a, fk + "/" + fv + " d=" + std::to_string(d) + " g=" + std::to_string(g) +
                                              " n_kv=" + std::to_string(n_kv) + " n_q=" + std::to_string(n_q));
          }
        }
}

TEST(Cuda, AttentionAtLongContextsMatchesTheCpuKernel) {
  REQUIRE_GPU();
  Rng rng(9);
  for (const char* f : {"f16", "tq4", "tq3"})
    for (int n_kv : {4096, 65536}) {
      AttnCase c(f, 128, 8, 32, n_kv, 1, rng);  // 8 KV / 32 query heads, decode
      std::vector<float> cpu(c.out_size()), gpu(c.out_size());
      AttentionArgs a = c.a, b = c.a;
      a.out = cpu.data();
      b.out = gpu.data();
      ASSERT_TRUE(attention_ref(a).ok());
      ASSERT_TRUE(cuda::attention(b).ok());
      EXPECT_LT(max_rel(gpu, cpu), 1e-4) << f << " n_kv=" << n_kv;
    }
  // A prefill of 2048 tokens, causal.
  AttnCase p("tq4", 128, 8, 32, 2048, 2048, rng);
  expect_matches_reference(p.a, "tq4 prefill 2048");
}

TEST(Cuda, AttentionWithMasksMeansPagesAndPerHeadBases) {
  REQUIRE_GPU();
  Rng rng(11);
  const int d = 128, H = 4, Hq = 16, n_kv = 300, n_q = 40;
  // Sliding window, a key range and a causal lag (protected tokens' passes).
  for (int window : {0, 1, 37})
    for (int begin : {0, 50})
      for (int lag : {0, 16}) {
        AttnCase c("tq4", d, H, Hq, n_kv, n_q, rng);
        c.a.window = window;
        c.a.kv_begin = begin;
        c.a.causal_lag = lag;
        expect_matches_reference(c.a, "window " + std::to_string(window) + " begin " + std::to_string(begin) +
                                          " lag " + std::to_string(lag));
      }
  // Mean centring.
  {
    AttnCase c("tq3", d, H, Hq, n_kv, 1, rng);
    std::vector<float> mk(H * d), mv(H * d);
    for (float& e : mk) e = static_cast<float>(rng.gaussian());
    for (float& e : mv) e = static_cast<float>(rng.gaussian());
    c.a.mu_k = mk.data();
    c.a.mu_v = mv.data();
    expect_matches_reference(c.a, "mean vectors");
  }
  // Paged: rows in blocks of 16 tokens, the table out of order.
  {
    AttnCase c("tq4", d, H, Hq, n_kv, 3, rng);
    const size_t rb = c.codec->row_bytes(), bt = 16, nblk = (n_kv + bt - 1) / bt;
    std::vector<int32_t> table(nblk);
    for (size_t b = 0; b < nblk; ++b) table[b] = static_cast<int32_t>(nblk - 1 - b);
    std::vector<uint8_t> kp(nblk * bt * H * rb), vp(kp.size());
    for (int t = 0; t < n_kv; ++t) {
      const size_t dst = (size_t(table[t / bt]) * bt + t % bt) * H * rb;
      std::memcpy(&kp[dst], &c.k[size_t(t) * H * rb], H * rb);
      std::memcpy(&vp[dst], &c.v[size_t(t) * H * rb], H * rb);
    }
    for (auto [rows, data] : {std::pair{&c.a.k, &kp}, std::pair{&c.a.v, &vp}}) {
      rows->data = data->data();
      rows->blocks = table.data();
      rows->block_shift = 4;
      rows->block_bytes = bt * H * rb;
      rows->end = data->data() + data->size();
    }
    expect_matches_reference(c.a, "paged");
  }
  // tqc: one basis per KV head, asymmetric widths.
  {
    std::vector<std::unique_ptr<Codec>> kc, vc;
    std::vector<const Codec*> kp, vp;
    for (int h = 0; h < H; ++h) {
      kc.push_back(gpu_codec("tqc4", d, h));
      vc.push_back(gpu_codec("tqc3", d, 50 + h));
      kp.push_back(kc.back().get());
      vp.push_back(vc.back().get());
    }
    std::vector<float> x(d), q(size_t(n_q) * Hq * d);
    for (float& e : q) e = static_cast<float>(rng.gaussian());
    std::vector<uint8_t> k(size_t(n_kv) * H * kc[0]->row_bytes()), v(size_t(n_kv) * H * vc[0]->row_bytes());
    for (int t = 0; t < n_kv; ++t)
      for (int h = 0; h < H; ++h) {
        for (float& e : x) e = static_cast<float>(rng.gaussian());
        ASSERT_TRUE(kc[h]->quantize(x.data(), 1, &k[(size_t(t) * H + h) * kc[0]->row_bytes()]).ok());
        for (float& e : x) e = static_cast<float>(rng.gaussian());
        ASSERT_TRUE(vc[h]->quantize(x.data(), 1, &v[(size_t(t) * H + h) * vc[0]->row_bytes()]).ok());
      }
    AttentionArgs a;
    attention_shape(a, q.data(), n_q, Hq, n_kv, H, d);
    a.k = {kc[0].get(), k.data(), 0, 0, kp.data()};
    a.v = {vc[0].get(), v.data(), 0, 0, vp.data()};
    a.causal_offset = n_kv - n_q;
    expect_matches_reference(a, "tqc per-head bases");
  }
}

TEST(Cuda, UnsupportedArgumentsAreRefusedWithAReason) {
  REQUIRE_GPU();
  Rng rng(3);
  AttnCase c("tq4", 64, 1, 32, 10, 1, rng);  // a group of 32 query heads
  std::vector<float> o(c.out_size());
  c.a.out = o.data();
  Status s = cuda::attention(c.a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("16"), std::string::npos) << s.message();
  AttnCase q("tq2-qjl", 64, 1, 1, 10, 1, rng);
  std::vector<float> o2(q.out_size());
  q.a.out = o2.data();
  s = cuda::attention(q.a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tq2-qjl"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tkv
