// llama.cpp's own distributions as the reference: its KL-divergence base
// files (`llama-perplexity --kl-divergence-base`, ../shared/models/families/)
// read by `perplexity`, a run compared token by token with what llama.cpp
// computed on the same file. The packing is written out here from its
// description (families/README.md), not taken from the reader under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "eval/kl_base.h"
#include "eval/perplexity.h"
#include "model/model.h"
#include "shared_data.h"
#include "util/text_file.h"

namespace tkv {
namespace {

// A llama.cpp base file as its README describes it: "_logits_", n_ctx,
// n_vocab, n_chunk, the tokens, then per scored position two floats (scale,
// least) and n_vocab u16 codes, padded to an even count.
std::string pack_llama_kl(uint32_t n_ctx, uint32_t n_vocab, const std::vector<int32_t>& tokens,
                          const std::vector<std::vector<float>>& rows) {
  std::string out = "_logits_";
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint32_t chunks = static_cast<uint32_t>(tokens.size() / n_ctx);
  put(&n_ctx, 4);
  put(&n_vocab, 4);
  put(&chunks, 4);
  put(tokens.data(), tokens.size() * 4);
  for (const auto& lp : rows) {  // log-probabilities, packed over [max - 16, max]
    float mx = lp[0], mn = lp[0];
    for (float x : lp) { mx = std::max(mx, x); mn = std::min(mn, x); }
    mn = std::max(mn, mx - 16);
    const float scale = (mx - mn) / 65535.0f;
    put(&scale, 4);
    put(&mn, 4);
    std::vector<uint16_t> q(n_vocab + (n_vocab & 1), 0);
    for (uint32_t v = 0; v < n_vocab; ++v)
      q[v] = lp[v] > mn ? static_cast<uint16_t>(std::lround((lp[v] - mn) / scale)) : 0;
    put(q.data(), q.size() * 2);
  }
  return out;
}

std::vector<float> log_softmax(std::vector<double> logits) {
  double mx = logits[0], s = 0;
  for (double x : logits) mx = std::max(mx, x);
  for (double x : logits) s += std::exp(x - mx);
  std::vector<float> out;
  for (double x : logits) out.push_back(static_cast<float>(x - mx - std::log(s)));
  return out;
}

TEST(LlamaKlBase, ReadsTheLayoutItsReadmeDescribes) {
  const uint32_t n_ctx = 8, V = 5;  // odd vocabulary: rows padded to an even count
  std::vector<int32_t> tokens = {1, 2, 3, 4, 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 1, 2};
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 2 * 3; ++r)  // 2 chunks x (8 - 1 - 4) scored positions
    rows.push_back(log_softmax({0.1 * r, 1.0, -2.0, 0.5 - r, r == 3 ? -40.0 : 2.0}));
  const std::string bytes = pack_llama_kl(n_ctx, V, tokens, rows);
  EXPECT_EQ(bytes.size(), 20u + 16 * 4 + 6 * (8 + 6 * 2));
  std::istringstream in(bytes);
  ASSERT_TRUE(is_llama_kl(in));
  auto b = read_llama_kl(in, bytes.size(), "t.kl");
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_EQ(b->n_ctx, 8u);
  EXPECT_EQ(b->n_vocab, 5u);
  EXPECT_EQ(b->chunks, 2u);
  EXPECT_EQ(b->per_chunk, 3u);
  EXPECT_EQ(b->tokens, tokens);
  EXPECT_EQ(llama_kl_row_u16(V), 10u);
  std::vector<uint16_t> row(llama_kl_row_u16(V));
  std::vector<float> lp(V);
  for (size_t r = 0; r < rows.size(); ++r) {
    ASSERT_TRUE(in.read(reinterpret_cast<char*>(row.data()), std::streamsize(row.size() * 2)));
    ASSERT_TRUE(decode_llama_kl_row(row.data(), V, lp.data(), "t.kl", r).ok());
    for (uint32_t v = 0; v < V; ++v) {
      // Within half a code of the value, except the token 40 nats down, kept at the least value (max - 16).
      if (r == 3 && v == 4) EXPECT_NEAR(lp[v], *std::max_element(rows[r].begin(), rows[r].end()) - 16, 1e-4);
      else EXPECT_NEAR(lp[v], rows[r][v], 16.0 / 65535) << r << " " << v;
    }
  }
}

TEST(LlamaKlBase, DamagedFilesAreRefusedNamingWhat) {
  const std::vector<int32_t> tokens = {1, 2, 3, 0, 0, 1, 2, 3};
  std::vector<std::vector<float>> rows(3, log_softmax({1, 2, 3, 4}));
  const std::string good = pack_llama_kl(8, 4, tokens, rows);
  auto read = [](const std::string& bytes) {
    std::istringstream in(bytes);
    return read_llama_kl(in, bytes.size(), "t.kl");
  };
  ASSERT_TRUE(read(good).ok());
  auto e = read(good.substr(0, good.size() - 1));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("truncated"), std::string::npos) << e.error();
  e = read(good + "x");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("trailing"), std::string::npos) << e.error();
  std::string bad = good;
  const int32_t big = 4;  // == n_vocab
  std::memcpy(&bad[20 + 4 * 5], &big, 4);
  e = read(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("token 5"), std::string::npos) << e.error();
  bad = good;
  const uint32_t huge = 1u << 30;
  std::memcpy(&bad[12], &huge, 4);  // n_vocab
  e = read(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("n_vocab"), std::string::npos) << e.error();
  // A row whose scale is not finite, or whose values do not sum to 1.
  std::vector<uint16_t> row(llama_kl_row_u16(4));
  std::memcpy(row.data(), good.data() + 20 + 32, row.size() * 2);
  std::vector<float> lp(4);
  ASSERT_TRUE(decode_llama_kl_row(row.data(), 4, lp.data(), "t.kl", 0).ok());
  std::vector<uint16_t> nan_row = row;
  const float nan = std::nanf("");
  std::memcpy(nan_row.data(), &nan, 4);
  Status s = decode_llama_kl_row(nan_row.data(), 4, lp.data(), "t.kl", 7);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("scored position 7"), std::string::npos) << s.message();
  std::vector<uint16_t> shifted = row;
  for (int v = 0; v < 4; ++v) shifted[4 + v] = static_cast<uint16_t>(shifted[4 + v] / 2);  // mass lost
  EXPECT_FALSE(decode_llama_kl_row(shifted.data(), 4, lp.data(), "t.kl", 0).ok());
}

struct Family {
  const char* name;
  double llama_ppl;  // ../shared/models/families/README.md: llama-perplexity -c 128 --chunks 4, f16 cache
};
// llama.cpp's figures, copied from the README's table.
const Family kFamilies[] = {
    {"llama", 5469.5312},    {"qwen2", 5874.7851}, {"qwen3", 5933.7289},  {"phi3", 45837.3373},
    {"qwen3moe", 5888.6577}, {"gemma3", 6996.8885}, {"qwen35", 6303.6550}, {"qwen35moe", 6507.6577},
    {"llama3-rope", 5638.7328},
};

struct FamilyRun {
  double ppl = 0, kld = 0, same_top = 0;
};

FamilyRun run_family(const Family& f, const std::string& k = "f16", const std::string& v = "f16") {
  const std::string dir = "models/families/";
  const std::string gguf = shared_path(dir + f.name + ".gguf"), base = shared_path(dir + f.name + ".llama-kl");
  auto m = Model::load(gguf);
  EXPECT_TRUE(m.ok()) << m.error();
  if (!m.ok()) return {};
  PerplexityOptions o;
  o.n_ctx = 128;
  o.max_chunks = 4;
  o.threads = 2;
  o.cache.type_k = k;
  o.cache.type_v = v;
  o.kl_base = base;
  o.kl_write = false;
  auto r = perplexity(**m, "", o);  // the tokens come from llama.cpp's file
  EXPECT_TRUE(r.ok()) << r.error();
  if (!r.ok()) return {};
  EXPECT_TRUE(r->has_kl);
  EXPECT_EQ(r->chunks, 4);
  return {r->ppl, r->kl.mean, r->kl.same_top};
}

// Every architecture against llama.cpp's own distributions: mean KLD below
// 1e-4 (f16 weights and caches in both engines; what differs is the order of
// floating-point sums, ~1e-6 measured) and perplexity within 0.05 % of the
// README's figure. A wrong rope style, norm or scale moves KLD by orders of
// magnitude (RESULTS §19).
TEST(LlamaKlBase, EveryFamilyMatchesLlamaCppsDistributions) {
  for (const Family& f : kFamilies) {
    if (std::string(f.name) == "llama3-rope") continue;  // below
    SCOPED_TRACE(f.name);
    TKV_NEED_SHARED(std::string("models/families/") + f.name + ".gguf",
                    std::string("models/families/") + f.name + ".llama-kl");
    const FamilyRun r = run_family(f);
    EXPECT_LT(r.kld, 1e-4);
    EXPECT_NEAR(r.ppl, f.llama_ppl, 5e-4 * f.llama_ppl);
    EXPECT_GT(r.same_top, 99.0);
    std::printf("%-10s PPL %.4f (llama.cpp %.4f, %+.4f %%), mean KLD %.3g, same top %.2f %%\n", f.name, r.ppl, f.llama_ppl,
                100 * (r.ppl / f.llama_ppl - 1), r.kld, r.same_top);
  }
}

// Compressed caches against llama.cpp's f16 distributions, on every kind of
// layer (full attention, gemma3's sliding windows, qwen35's recurrent layers
// beside attention): each figure bounded by its measured value (RESULTS §19,
// 2026-12-02) with 30 % headroom for other SIMD targets and thread counts.
// What it guards: a step's rows not centred on window layers made gemma3's
// tq4 KLD 8x worse with every other test passing (issue 34).
TEST(LlamaKlBase, CompressedCachesStayWithinTheirMeasuredKld) {
  struct Case { const char* name; const char* k; const char* v; double measured; };
  const Case cases[] = {
      {"llama", "tq4", "tq4", 0.00165951},   {"qwen3", "tq4", "tq4", 0.00158296},
      {"gemma3", "tq4", "tq4", 0.0135066},   {"gemma3", "tq3", "tq3", 0.052114},
      {"qwen35", "tq4", "tq4", 2.56363e-05}, {"qwen35moe", "q8_0", "tq3", 8.42555e-05},
      {"phi3", "tq4", "tq4", 0.0029324},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " " + c.k + "/" + c.v);
    const Family* f = nullptr;
    for (const Family& x : kFamilies)
      if (std::string(x.name) == c.name) f = &x;
    ASSERT_NE(f, nullptr);
    TKV_NEED_SHARED(std::string("models/families/") + c.name + ".gguf",
                    std::string("models/families/") + c.name + ".llama-kl");
    const FamilyRun r = run_family(*f, c.k, c.v);
    std::printf("%-10s %s/%s mean KLD %.6g (bound %.6g)\n", c.name, c.k, c.v, r.kld, 1.3 * c.measured);
    EXPECT_LT(r.kld, 1.3 * c.measured);
    EXPECT_GT(r.kld, 1e-5);  // a compressed cache does lose something: the figure is not the f16 one
  }
}

// Llama 3's RoPE factors (rope_freqs.weight) against llama.cpp.
TEST(LlamaKlBase, Llama3RopeFactorsMatchLlamaCpp) {
  const Family& f = kFamilies[8];
  TKV_NEED_SHARED("models/families/llama3-rope.gguf", "models/families/llama3-rope.llama-kl");
  const FamilyRun r = run_family(f);
  std::printf("llama3-rope PPL %.4f (llama.cpp %.4f), mean KLD %.3g\n", r.ppl, f.llama_ppl, r.kld);
  EXPECT_LT(r.kld, 1e-4);
  EXPECT_NEAR(r.ppl, f.llama_ppl, 5e-4 * f.llama_ppl);
}

// turbokv's tokenizer gives llama.cpp's tokens for the text the base files
// were made from (the first n_ctx * chunks of them: llama.cpp stores those).
TEST(LlamaKlBase, TokensOfTheTextEqualLlamaCpps) {
  for (const char* name : {"llama", "phi3", "qwen35"}) {
    SCOPED_TRACE(name);
    const std::string dir = "models/families/";
    TKV_NEED_SHARED(dir + name + ".gguf", dir + name + ".llama-kl", dir + "wikitext-2-test-60k-lf.txt");
    auto m = Model::load(shared_path(dir + name + ".gguf"));
    ASSERT_TRUE(m.ok()) << m.error();
    auto text = read_text_file(shared_path(dir + "wikitext-2-test-60k-lf.txt"));
    ASSERT_TRUE(text.ok());
    std::ifstream in(shared_path(dir + name + ".llama-kl"), std::ios::binary);
    auto b = read_llama_kl(in, std::filesystem::file_size(shared_path(dir + name + ".llama-kl")), name);
    ASSERT_TRUE(b.ok()) << b.error();
    const std::vector<int32_t> ours = (*m)->tokenizer().encode(*text, true);
    ASSERT_GE(ours.size(), b->tokens.size());
    size_t diff = 0;
    while (diff < b->tokens.size() && ours[diff] == b->tokens[diff]) ++diff;
    EXPECT_EQ(diff, b->tokens.size()) << "first difference at token " << diff;
  }
}

}  // namespace
}  // namespace tkv
