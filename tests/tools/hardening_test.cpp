// Hardening (docs/ARCHITECTURE.md, "What each reader trusts" and "Non-finite
// values"): NaN and Inf in K/V rows and in logits, resource limits checked
// before allocation, and the inputs the fuzzers found, as regression tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "cache/block_pool.h"
#include "cache/kv_cache.h"
#include "codec/format.h"
#include "eval/kl_base.h"
#include "eval/kv_file.h"
#include "model/gen_model.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "paged_test_util.h"
#include "test_models.h"
#include "test_cli.h"
#include "util/memory.h"
#include "util/rng.h"

namespace tkv {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> gaussians(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.gaussian());
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// A NaN or Inf in a K or V row is stored as a zero row, in the staging area
// and in every format, counted, and the first named: the cache then holds
// exactly what a cache given zero rows there holds (rows, means, attention).
TEST(NonFinite, RowsAreStoredAsZerosInEveryFormatAndStagingAndCounted) {
  Rng rng(20261201);
  const int H = 2, d = 64, T = 40, M = 16;
  for (const char* fmt : {"f32", "f16", "bf16", "q8_0", "q4_0", "q8_0r", "q4_0r", "tq1", "tq2", "tq3", "tq3.5", "tq4",
                          "tq8", "tq4-nc", "tq3-ip"})
    for (bool centre : {true, false}) {
      SCOPED_TRACE(std::string(fmt) + (centre ? " centred" : " plain"));
      KvCacheOptions o;
      o.type_k = o.type_v = fmt;
      o.capacity = 128;
      o.mean_center = centre;
      o.mean_tokens = M;
      auto a = KvCache::create(1, H, d, o), b = KvCache::create(1, H, d, o);
      ASSERT_TRUE(a.ok() && b.ok());
      std::vector<float> k = gaussians(rng, size_t(T) * H * d), v = gaussians(rng, k.size());
      std::vector<float> kz = k, vz = v;
      auto poison = [&](std::vector<float>& x, std::vector<float>& xz, int t, int h, int i, float bad) {
        x[(size_t(t) * H + h) * d + i] = bad;
        std::fill(xz.begin() + (size_t(t) * H + h) * d, xz.begin() + (size_t(t) * H + h + 1) * d, 0.0f);
      };
      poison(k, kz, 3, 1, 5, kNaN);    // a staged row (while centring waits for M rows)
      poison(v, vz, 30, 0, 0, kInf);   // a coded row
      poison(k, kz, 31, 1, 63, -kInf);
      // One token at a time through the staging area, then the rest at once.
      for (int t = 0; t < T;) {
        const int n = t < 20 ? 1 : T - t;
        const size_t at = size_t(t) * H * d;
        ASSERT_TRUE((*a)->append(0, t, n, &k[at], &v[at]).ok());
        ASSERT_TRUE((*b)->append(0, t, n, &kz[at], &vz[at]).ok());
        t += n;
        if (t == 10) {  // while staging (centred) the staged rows are read
          const auto q = gaussians(rng, size_t(2) * H * 3 * d);
          const auto oa = paged_test::attend(**a, 0, q, 2, 3, 1);
          EXPECT_TRUE(all_finite(oa));
          EXPECT_TRUE(same_bits(oa, paged_test::attend(**b, 0, q, 2, 3, 1)));
        }
      }
      const KvCache::NonFinite& nf = (*a)->nonfinite();
      EXPECT_EQ(nf.rows, 3);
      EXPECT_EQ(nf.layer, 0);
      EXPECT_EQ(nf.head, 1);
      EXPECT_EQ(nf.pos, 3);
      EXPECT_FALSE(nf.v);
      EXPECT_EQ((*b)->nonfinite().rows, 0);
      if ((*a)->mu_k(0)) {
        const std::vector<float> ma((*a)->mu_k(0), (*a)->mu_k(0) + H * d), mb((*b)->mu_k(0), (*b)->mu_k(0) + H * d);
        EXPECT_TRUE(all_finite(ma));
        EXPECT_TRUE(same_bits(ma, mb));
      }
      for (bool vside : {false, true}) {
        const KvRows ra = vside ? (*a)->v_rows(0) : (*a)->k_rows(0), rb = vside ? (*b)->v_rows(0) : (*b)->k_rows(0);
        const size_t rbytes = ra.codec->row_bytes();
        for (int t = 0; t < T; ++t)
          for (int h = 0; h < H; ++h)
            ASSERT_EQ(std::memcmp(ra.row(t, h, ra.token_stride, ra.head_stride),
                                  rb.row(t, h, rb.token_stride, rb.head_stride), rbytes),
                      0)
                << (vside ? "V" : "K") << " t=" << t << " h=" << h;
      }
      const auto q = gaussians(rng, size_t(5) * H * 3 * d);
      const auto oa = paged_test::attend(**a, 0, q, 5, 3, 1);
      EXPECT_TRUE(all_finite(oa));
      EXPECT_TRUE(same_bits(oa, paged_test::attend(**b, 0, q, 5, 3, 1)));
    }
}

// The fuzzer's first find (fuzz/corpus/kv_file/regress-subnormal-scale.bin):
// a block whose largest value is subnormal gave q8_0 a scale whose inverse
// overflowed, and 0 * inf = NaN reached a float-to-int conversion (undefined).
// Every format now codes such rows as zeros, reference and SIMD alike.
TEST(NonFinite, SubnormalRowsCodeAsZerosInEveryFormat) {
  std::ifstream in(std::string(TKV_SOURCE_DIR) + "/fuzz/corpus/kv_file/regress-subnormal-scale.bin", std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  ASSERT_FALSE(bytes.empty()) << "the regression input is part of the repository";
  auto kv = parse_kv_file("regress", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(kv.ok()) << kv.error();
  for (const auto& name : all_format_names()) {
    SCOPED_TRACE(name);
    const int d = 64;
    auto c = make_codec(name, d);
    ASSERT_TRUE(c.ok());
    std::vector<float> rows(2 * d, 0.0f);
    for (int i = 0; i < d; i += 3) rows[i] = (i % 2 ? 1 : -1) * 1e-40f * float(i + 1);  // row 0: all subnormal
    rows[d + 7] = std::numeric_limits<float>::denorm_min();                             // row 1: one
    std::vector<uint8_t> ref(2 * (*c)->row_bytes()), simd(ref.size());
    ASSERT_TRUE((*c)->quantize(rows.data(), 2, ref.data(), Impl::kRef).ok());
    ASSERT_TRUE((*c)->quantize(rows.data(), 2, simd.data(), Impl::kSimd).ok());
    EXPECT_EQ(ref, simd);
    std::vector<float> back(rows.size());
    (*c)->dequantize(simd.data(), 2, back.data());
    for (int i = 0; i < 2 * d; ++i) EXPECT_LE(std::fabs(back[i]), 1e-30f) << "element " << i;
    // The fuzzer's input itself: coded (or refused with an error where a
    // value is out of the format's range), never undefined.
    std::vector<float> row(d, 0.0f);
    std::copy(kv->data.begin(), kv->data.begin() + std::min<size_t>(kv->data.size(), d), row.begin());
    std::vector<uint8_t> one((*c)->row_bytes());
    if ((*c)->quantize(row.data(), 1, one.data()).ok()) {
      std::vector<float> dec(d);
      (*c)->dequantize(one.data(), 1, dec.data());
      EXPECT_TRUE(all_finite(dec));
    }
  }
  // The q8_0 kernel with a subnormal block maximum, checked on its own.
  auto q8 = make_codec("q8_0", 32);
  std::vector<float> x(32, 0.0f);
  x[4] = 1e-39f;
  std::vector<uint8_t> out((*q8)->row_bytes(), 0xAA);
  ASSERT_TRUE((*q8)->quantize(x.data(), 1, out.data(), Impl::kRef).ok());
  for (size_t i = 2; i < out.size(); ++i) EXPECT_EQ(out[i], 0) << "code " << i;
}

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tkv_hard_" + std::to_string(getpid()) + "_" + name)).string();
}

TEST(NonFinite, NaNLogitsAreAnErrorOrFlaggedPerSequence) {
  const std::string path = small_model(temp("nan.gguf"), "output_norm.weight");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  const ModelConfig& c = (*m)->config();
  KvCacheOptions o;
  o.capacity = 64;
  auto cache = KvCache::create(c.kv_shape(), o);
  std::vector<float> logits(size_t(4) * c.n_vocab);
  const int32_t toks[4] = {1, 50, 60, 70};
  Status s = (*m)->forward(toks, 4, 0, **cache, 1, logits.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not finite"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("position 3"), std::string::npos) << s.message();
  auto c2 = KvCache::create(c.kv_shape(), o);
  s = (*m)->forward(toks, 4, 0, **c2, 1, logits.data(), true);  // every token's logits (perplexity)
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("position 0"), std::string::npos) << s.message();
  // In a batch with the flag set, the step succeeds and each bad sequence is flagged.
  auto c3 = KvCache::create(c.kv_shape(), o), c4 = KvCache::create(c.n_layer, c.n_head_kv, c.head_dim, o);
  bool bad3 = false, bad4 = false;
  std::vector<float> l3(c.n_vocab), l4(c.n_vocab);
  s = (*m)->forward_batch({{c3->get(), toks, 1, 0, l3.data(), &bad3}, {c4->get(), toks, 3, 0, l4.data(), &bad4}}, 1);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(bad3);
  EXPECT_TRUE(bad4);
  // A healthy model's sequences are not flagged.
  auto good = Model::load(small_model(temp("good.gguf")));
  ASSERT_TRUE(good.ok());
  auto c5 = KvCache::create(c.kv_shape(), o);
  bad3 = true;
  EXPECT_TRUE((*good)->forward_batch({{c5->get(), toks, 2, 0, l3.data(), &bad3}}, 1).ok());
  EXPECT_FALSE(bad3);
  std::remove(path.c_str());
  std::remove(temp("good.gguf").c_str());
}

// One sequence with NaN logits in a batched step: only it is flagged, and
// the healthy sequence beside it gets the bits it gets alone (a NaN row of
// the token embedding poisons exactly the sequences that contain that token).
TEST(NonFinite, OneBadSequenceInAStepLeavesTheOthersBitForBit) {
  const std::string path = small_model(temp("nan_row.gguf"));
  const int32_t bad_token = 77;
  poison_gguf(path, "token_embd.weight", uint64_t(bad_token) * 64);  // F32 rows of dim 64
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  const ModelConfig& c = (*m)->config();
  KvCacheOptions o;
  o.capacity = 64;
  auto fresh = [&] { return std::move(*KvCache::create(c.kv_shape(), o)); };
  // The bad token last: earlier ones only see its (zeroed) K and V rows.
  const int32_t good[3] = {1, 40, 50}, poisoned[3] = {1, 50, bad_token};
  std::vector<float> alone(c.n_vocab), lg(c.n_vocab), lb(c.n_vocab);
  auto ca = fresh();
  ASSERT_TRUE((*m)->forward(good, 3, 0, *ca, 1, alone.data()).ok());
  auto cg = fresh(), cb = fresh();
  bool flag_g = true, flag_b = false;
  ASSERT_TRUE((*m)->forward_batch({{cg.get(), good, 3, 0, lg.data(), &flag_g}, {cb.get(), poisoned, 3, 0, lb.data(), &flag_b}}, 1).ok());
  EXPECT_FALSE(flag_g);
  EXPECT_TRUE(flag_b);
  EXPECT_TRUE(same_bits(alone, lg));
  EXPECT_GT(cb->nonfinite().rows, 0);
  EXPECT_EQ(cg->nonfinite().rows, 0);
  std::remove(path.c_str());
}

class HardeningCli : public Cli {};

TEST_F(HardeningCli, NaNWeightsAreAClearErrorInRunAndPerplexity) {
  const std::string m = small_model(path("nan.gguf"), "output_norm.weight");
  CliResult r = run("run -m '" + m + "' -p 'hello there' -n 4");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("not finite"), std::string::npos) << r.err;
  std::ofstream(path("text.txt")) << std::string(3000, 'a') + " the quick brown fox jumps over the lazy dog\n";
  r = run("perplexity -m '" + m + "' -f '" + path("text.txt") + "' -c 64 --chunks 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("not finite"), std::string::npos) << r.err;
}

TEST_F(HardeningCli, AContextThatDoesNotFitIsAnErrorNamingTheNumbers) {
  const std::string m = small_model(path("m.gguf"));
  CliResult r = run("run -m '" + m + "' -p hi -n 2 -c 10000000");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE((r.out + r.err).find("10000000"), std::string::npos) << r.err;
  EXPECT_NE((r.out + r.err).find("4194304"), std::string::npos) << r.err;
  // 4M tokens of f32 K and V (2 layers x 2 heads x 16 dims) need 2 GiB; with
  // 1 GiB available that is an error before anything is allocated.
  setenv("TKV_AVAILABLE_MEMORY", "1073741824", 1);
  r = run("run -m '" + m + "' -p hi -n 2 -c 4194304 -ctk f32 -ctv f32");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("4194304 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("need 2.0 GiB, more than the 1.0 GiB of memory available"), std::string::npos) << r.err;
  r = run("serve -m '" + m + "' --port 0 --kv-budget 3GiB");  // (refused before it listens)
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("of memory available"), std::string::npos) << r.err;
  unsetenv("TKV_AVAILABLE_MEMORY");
}

TEST(ResourceLimits, BlockPoolChecksMemoryBeforeAllocating) {
  auto layout = KvLayout::create(4, 8, 128, KvCacheOptions{});
  ASSERT_TRUE(layout.ok());
  setenv("TKV_AVAILABLE_MEMORY", "1000000", 1);
  auto p = BlockPool::create(*layout, 256, 1000);
  unsetenv("TKV_AVAILABLE_MEMORY");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("256000 tokens of 4 layers x 8 KV heads"), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("of memory available"), std::string::npos) << p.error();
  EXPECT_TRUE(BlockPool::create(*layout, 256, 4).ok());
  EXPECT_GT(available_memory(), uint64_t(1) << 20);
}

// GGUF headers that claim more than any file could hold: each is refused by
// comparing with the file's size before anything is sized by the claim.
TEST(ResourceLimits, GgufClaimsBeyondTheFileAreErrorsNamingTheNumbers) {
  const std::string path = small_model(temp("claims.gguf"));
  std::ifstream in(path, std::ios::binary);
  const std::string good{std::istreambuf_iterator<char>(in), {}};
  std::remove(path.c_str());
  auto parse = [](std::string bytes) {
    return gguf::File::from_memory("claims.gguf", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  auto patch = [&](size_t at, uint64_t v) {
    std::string b = good;
    std::memcpy(&b[at], &v, 8);
    return b;
  };
  ASSERT_TRUE(parse(good).ok());
  // 2^40 tensors.
  auto r = parse(patch(8, uint64_t(1) << 40));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("tensor count 1099511627776"), std::string::npos) << r.error();
  // A tensor of 1 TB: token_embd.weight's second dimension made 2^39 / 256.
  const size_t name = good.find("token_embd.weight");
  ASSERT_NE(name, std::string::npos);
  const size_t dim1 = name + 17 + 4 + 8;  // name, n_dims, dims[0]
  r = parse(patch(dim1, (uint64_t(1) << 40) / 4 / 64));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("1099511627776 bytes"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("runs past the end"), std::string::npos) << r.error();
  // A vocabulary of 2^31 tokens.
  const size_t toks = good.find("tokenizer.ggml.tokens");
  ASSERT_NE(toks, std::string::npos);
  r = parse(patch(toks + 21 + 4 + 4, uint64_t(1) << 31));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("2147483648"), std::string::npos) << r.error();
}

// The KL base reader checks its header against the file's size and each row
// before using it.
TEST(ResourceLimits, KlBaseHeaderAndRowsAreChecked) {
  KlBaseHeader h;
  h.n_ctx = 8;
  h.n_vocab = 4;
  h.chunks = 1;
  h.per_chunk = kl_scored_per_chunk(8);
  std::vector<float> rows(size_t(h.per_chunk) * 4, std::log(0.25f));
  auto file = [&](const KlBaseHeader& hh, size_t n_floats) {
    std::string b(reinterpret_cast<const char*>(&hh), sizeof(hh));
    b.append(reinterpret_cast<const char*>(rows.data()), n_floats * 4);
    return b;
  };
  auto read = [](const std::string& b) {
    std::istringstream in(b);
    return read_kl_header(in, b.size(), "base.kl");
  };
  EXPECT_TRUE(read(file(h, rows.size())).ok());
  auto r = read(file(h, rows.size() - 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("truncated"), std::string::npos) << r.error();
  KlBaseHeader big = h;
  big.n_vocab = 1u << 31;
  r = read(file(big, rows.size()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("n_vocab 2147483648"), std::string::npos) << r.error();
  big = h;
  big.chunks = 0xFFFFFFFFu;
  r = read(file(big, rows.size()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("4294967295 chunks"), std::string::npos) << r.error();
  EXPECT_TRUE(check_kl_row(rows.data(), 4, "base.kl", 0).ok());
  rows[2] = kNaN;
  EXPECT_NE(check_kl_row(rows.data(), 4, "base.kl", 0).message().find("token 2"), std::string::npos);
  rows[2] = std::log(0.5f);  // sums to 1.25
  EXPECT_NE(check_kl_row(rows.data(), 4, "base.kl", 0).message().find("sum to"), std::string::npos);
}

}  // namespace
}  // namespace tkv
