// Cache files (cache/cache_file.h): a saved and reloaded cache continues
// exactly as the original (next 16 greedy tokens and their logits bitwise)
// for every format family, policy, preset and mean-centring state; a prompt
// cache keeps exactly the common prefix and then equals a cold run; every
// truncation, flipped byte, absurd field and mismatch is refused with its own
// message; an interrupted write leaves the previous file intact.
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "cache/cache_file.h"
#include "eval/calibrate.h"
#include "model/gen_model.h"
#include "model/prompt_cache.h"
#include "test_cli.h"
#include "util/rng.h"

namespace tkv {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A small random model with d = 64 (every format, q4_0 blocks, tqc) and one
// with another seed (another fingerprint).
struct Models {
  std::string path, other_path;
  std::unique_ptr<Model> model, other;
  Models() {
    GenModelOptions o;
    o.layers = 2;
    o.dim = 128;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 64;
    o.ffn = 160;
    o.weight_scale = 3.0f;
    path = testing::TempDir() + std::to_string(getpid()) + "_tkv_cachefile_model.gguf";
    EXPECT_TRUE(generate_model(o, nullptr, path).ok());
    model = std::move(*Model::load(path));
    o.seed = 9;
    other_path = testing::TempDir() + std::to_string(getpid()) + "_tkv_cachefile_other.gguf";
    EXPECT_TRUE(generate_model(o, nullptr, other_path).ok());
    other = std::move(*Model::load(other_path));
  }
  ~Models() {
    std::remove(path.c_str());
    std::remove(other_path.c_str());
  }
};

const Models& models() {
  static Models m;
  return m;
}

std::vector<int32_t> random_tokens(int n, uint64_t seed, int vocab) {
  Rng r(seed);
  std::vector<int32_t> t{1};
  while (static_cast<int>(t.size()) < n) t.push_back(3 + static_cast<int32_t>(r.next() % uint64_t(vocab - 3)));
  return t;
}

std::unique_ptr<KvCache> make_cache(const KvCacheOptions& co) {
  const ModelConfig& c = models().model->config();
  auto k = KvCache::create(c.kv_shape(), co);
  EXPECT_TRUE(k.ok()) << k.error();
  return std::move(*k);
}

// Greedy steps from `logits` (the last prompt token's): every step's logits.
std::vector<std::vector<float>> greedy(const Model& m, KvCache& cache, std::vector<float> logits, int pos, int steps) {
  std::vector<std::vector<float>> all;
  for (int i = 0; i < steps; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    Status s = m.forward(&next, 1, pos + i, cache, 1, logits.data());
    EXPECT_TRUE(s.ok()) << s.message();
    all.push_back(logits);
  }
  return all;
}

std::string temp_file(const std::string& name) { return testing::TempDir() + "tkv_cf_" + std::to_string(getpid()) + name; }

struct Case {
  std::string name, k, v;
  bool mean_center = true;
  std::string preset = {};
  bool policy = false;
  int prompt = 100;
};

std::shared_ptr<const KvPolicy> small_policy() {
  static std::shared_ptr<const KvPolicy> pol = [] {
    std::string text;
    for (int i = 0; i < 40; ++i) text += "the cat sat on the mat, then " + std::to_string(i * 7) + " dogs ran.\n";
    CalibrateOptions o;
    o.n_ctx = 64;
    o.tokens = 192;
    o.bits = 4.25;
    auto p = calibrate(*models().model, text, o);
    EXPECT_TRUE(p.ok()) << p.error();
    return std::make_shared<const KvPolicy>(std::move(*p));
  }();
  return pol;
}

KvCacheOptions options_for(const Case& c, int capacity) {
  KvCacheOptions co;
  co.type_k = c.k;
  co.type_v = c.v;
  co.mean_center = c.mean_center;
  co.capacity = capacity;
  if (!c.preset.empty()) {
    EXPECT_TRUE(apply_kv_preset(c.preset, models().model->config().n_layer, co).ok());
  }
  if (c.policy) co.policy = small_policy();
  return co;
}

TEST(CacheFile, RoundTripContinuesBitwiseForEveryFamily) {
  const Model& m = *models().model;
  const int V = m.config().n_vocab;
  std::vector<Case> cases = {{"f16", "f16", "f16"},       {"q8_0", "q8_0", "q8_0"},    {"q4_0r", "q4_0r", "q4_0r"},
                             {"tq2", "tq2", "tq2"},       {"tq3", "tq3", "tq3"},       {"tq4", "tq4", "tq4"},
                             {"tq5", "tq5", "tq5"},       {"tq6", "tq6", "tq6"},       {"tq7", "tq7", "tq7"},
                             {"tq8", "tq8", "tq8"},       {"tq3.5", "tq3.5", "tq3.5"}, {"tq4-ip", "tq4-ip", "tq3-ip"},
                             {"tq4-nc", "tq4-nc", "tq4-nc"}, {"asym", "q8_0", "tq3"},  {"mean-off", "tq4", "tq4", false},
                             {"staging", "tq4", "tq4", true, "", false, 40},
                             {"preset", "", "", true, "balanced"},
                             {"policy", "", "", true, "", true}};
  std::set<std::string> states_seen;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const KvCacheOptions co = options_for(c, c.prompt + 20);
    auto a = make_cache(co);
    const auto prompt = random_tokens(c.prompt, 11, V);
    std::vector<float> logits(V);
    ASSERT_TRUE(m.forward(prompt.data(), c.prompt, 0, *a, 1, logits.data()).ok());
    const std::string path = temp_file(c.name + ".tkvc");
    ASSERT_TRUE(save_cache_file(path, *a, m.fingerprint(), prompt).ok());
    auto b = load_cache_file(path, m.config().kv_shape(), co, m.fingerprint(), V);
    ASSERT_TRUE(b.ok()) << b.error();
    EXPECT_EQ(b->tokens, prompt);
    EXPECT_EQ(b->cache->n_tokens(), c.prompt);
    EXPECT_EQ(b->cache->staging(0), a->staging(0));
    states_seen.insert(a->staging(0) ? "staging" : a->mu_k(0) ? "centred" : "plain");
    // The file holds exactly the cache's rows (tq4 bytes for a tq4 cache).
    const ModelConfig& mc = m.config();
    auto src = open_file_source(path);
    ASSERT_TRUE(src.ok());
    CacheFileHeader h;
    ASSERT_TRUE(verify_cache_file(**src, &h).ok());
    const size_t f16_row = size_t(2) * mc.head_dim;
    size_t rows = 0;
    for (int l = 0; l < mc.n_layer; ++l)
      rows += size_t(c.prompt) * mc.n_head_kv *
              (a->staging(l) ? 2 * f16_row : a->k_rows(l).codec->row_bytes() + a->v_rows(l).codec->row_bytes());
    EXPECT_EQ(h.row_payload_bytes, rows);
    EXPECT_EQ(h.type_k[0], a->type_k(0));
    const auto want = greedy(m, *a, logits, c.prompt, 16);
    const auto got = greedy(m, *b->cache, logits, c.prompt, 16);
    for (int i = 0; i < 16; ++i)
      ASSERT_EQ(std::memcmp(want[i].data(), got[i].data(), sizeof(float) * V), 0) << "step " << i;
    std::remove(path.c_str());
  }
  EXPECT_EQ(states_seen, (std::set<std::string>{"plain", "staging", "centred"}));
}

// Evaluates `prompt` through a prompt cache at `path` as `run --prompt-cache`
// does; returns the 16 greedy steps' logits.
std::vector<std::vector<float>> run_with_prompt_cache(const std::string& path, const std::vector<int32_t>& prompt,
                                                      const KvCacheOptions& co, int* reused) {
  const Model& m = *models().model;
  auto pc = open_prompt_cache(path, m, co, prompt);
  EXPECT_TRUE(pc.ok());
  *reused = pc->reused;
  std::vector<float> logits(m.config().n_vocab);
  const int n = static_cast<int>(prompt.size());
  EXPECT_TRUE(prefill(m, prompt.data() + pc->reused, n - pc->reused, pc->reused, *pc->cache, 1, 512, logits.data()).ok());
  EXPECT_TRUE(save_cache_file(path, *pc->cache, m.fingerprint(), prompt).ok());
  return greedy(m, *pc->cache, logits, n, 16);
}

TEST(CacheFile, PromptCacheReusesTheCommonPrefixAndEqualsAColdRun) {
  const Model& m = *models().model;
  const int V = m.config().n_vocab;
  for (const char* fmt : {"tq4", "f16"}) {
    SCOPED_TRACE(fmt);
    KvCacheOptions co;
    co.type_k = co.type_v = fmt;
    co.capacity = 400;
    const std::string path = temp_file(std::string("prompt_") + fmt + ".tkvc");
    std::remove(path.c_str());
    const auto first = random_tokens(300, 21, V);
    auto second = first;
    second.resize(200);
    const auto tail = random_tokens(61, 22, V);
    second.insert(second.end(), tail.begin() + 1, tail.end());  // 260 tokens, 200 shared
    int reused = -1;
    run_with_prompt_cache(path, first, co, &reused);
    EXPECT_EQ(reused, 0);
    const auto warm = run_with_prompt_cache(path, second, co, &reused);
    EXPECT_EQ(reused, 200);
    // Cold: the whole second prompt in one batch on a fresh cache.
    auto cold_cache = make_cache(co);
    std::vector<float> logits(V);
    ASSERT_TRUE(m.forward(second.data(), int(second.size()), 0, *cold_cache, 1, logits.data()).ok());
    const auto cold = greedy(m, *cold_cache, logits, int(second.size()), 16);
    for (int i = 0; i < 16; ++i) {
      const auto a = std::max_element(cold[i].begin(), cold[i].end()) - cold[i].begin();
      const auto b = std::max_element(warm[i].begin(), warm[i].end()) - warm[i].begin();
      ASSERT_EQ(a, b) << "greedy token " << i;
      ASSERT_EQ(std::memcmp(cold[i].data(), warm[i].data(), sizeof(float) * V), 0) << "logits of step " << i;
    }
    // The same prompt again: all but its last token reused.
    run_with_prompt_cache(path, second, co, &reused);
    EXPECT_EQ(reused, 259);
    // A prefix shorter than the 64 rows the means come from cannot be kept.
    auto short_prefix = second;
    short_prefix.resize(30);
    short_prefix.push_back(5);
    short_prefix.push_back(6);
    auto pc = open_prompt_cache(path, m, co, short_prefix);
    ASSERT_TRUE(pc.ok());
    EXPECT_EQ(pc->reused, std::string(fmt) == "f16" ? 30 : 0);
    if (std::string(fmt) == "tq4") {
      EXPECT_NE(pc->note.find("64 rows"), std::string::npos) << pc->note;
    }
    std::remove(path.c_str());
  }
}

// A valid file of 100 tq4 tokens, for the corruption tests.
struct ValidFile {
  std::string bytes;
  KvCacheOptions co;
  ValidFile() {
    const Model& m = *models().model;
    co.capacity = 128;
    auto c = make_cache(co);
    const auto prompt = random_tokens(100, 3, m.config().n_vocab);
    std::vector<float> logits(m.config().n_vocab);
    EXPECT_TRUE(m.forward(prompt.data(), 100, 0, *c, 1, logits.data()).ok());
    const std::string p = temp_file("valid.tkvc");
    EXPECT_TRUE(save_cache_file(p, *c, m.fingerprint(), prompt).ok());
    bytes = slurp(p);
    std::remove(p.c_str());
  }
  Expected<LoadedCache> load(const std::string& b, const KvCacheOptions* opt = nullptr, const Model* mm = nullptr) const {
    const Model& m = mm ? *mm : *models().model;
    auto src = memory_source(b.data(), b.size());
    const ModelConfig& c = m.config();
    return load_cache_file(*src, c.kv_shape(), opt ? *opt : co, m.fingerprint(), c.n_vocab);
  }
};

// The header's checksum recomputed after a field was changed on purpose.
std::string reseal_header(std::string b) {
  uint32_t len;
  std::memcpy(&len, b.data() + 12, 4);
  const uint64_t h = XXH64(b.data(), 16 + len, 0);
  std::memcpy(b.data() + 16 + len, &h, 8);
  return b;
}
template <class T>
std::string patched(const std::string& b, size_t off, T v) {
  std::string c = b;
  std::memcpy(c.data() + off, &v, sizeof(T));
  return c;
}
template <class T>
std::string with_field(const std::string& b, size_t off, T v) {
  return reseal_header(patched(b, off, v));
}

// README's claim: a file holds the cache's own rows plus under 1 %, so a tq4
// file is 3.9x smaller than an f16 one (head dim 128: 4.125 bits a value),
// on a model of a realistic width (8 layers of 4 KV heads: the token ids,
// 4 bytes each, are shared by every layer and head) at 2048 tokens (the
// means, 8 bytes a coordinate per head, are paid once).
TEST(CacheFile, FileIsTheRowsPlusUnderOnePercent) {
  const int L = 8, H = 4, d = 128, n = 2048;
  Rng rng(11);
  std::vector<float> k(size_t(n) * H * d), v(k.size());
  for (auto& x : k) x = static_cast<float>(rng.gaussian());
  for (auto& x : v) x = static_cast<float>(rng.gaussian());
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = i % 1000;
  std::map<std::string, uintmax_t> size;
  for (const char* f : {"f16", "tq4"}) {
    KvCacheOptions co;
    co.type_k = co.type_v = f;
    co.capacity = n;
    auto cache = KvCache::create(L, H, d, co);
    ASSERT_TRUE(cache.ok()) << cache.error();
    for (int l = 0; l < L; ++l) ASSERT_TRUE((*cache)->append(l, 0, n, k.data(), v.data()).ok());
    const std::string file = temp_file(std::string("rows_") + f + ".tkvc");
    ASSERT_TRUE(save_cache_file(file, **cache, 42, tokens).ok());
    size[f] = fs::file_size(file);
    // The rows of n tokens: layers x KV heads x (K row + V row), in the format's bytes.
    const auto& lc = (*cache)->layout().layer(0);
    const double rows = double(n) * L * H * double(lc.k_row + lc.v_row);
    EXPECT_GE(double(size[f]), rows) << f;
    EXPECT_LT(double(size[f]), 1.01 * rows) << f << ": " << size[f] << " bytes for " << rows << " bytes of rows";
    std::remove(file.c_str());
  }
  const double ratio = double(size["f16"]) / double(size["tq4"]);
  EXPECT_GT(ratio, 3.85) << ratio;
  EXPECT_LT(ratio, 3.88) << ratio;  // 16 / 4.125 = 3.879, less the overhead
}

TEST(CacheFile, TheValidFileLoads) {
  ValidFile f;
  auto r = f.load(f.bytes);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->cache->n_tokens(), 100);
}

TEST(CacheFile, EveryTruncationIsRefused) {
  ValidFile f;
  const size_t n = f.bytes.size();
  for (int i = 0; i < 50; ++i) {
    const size_t len = i * (n - 1) / 49;  // 0 .. n-1
    auto r = f.load(f.bytes.substr(0, len));
    ASSERT_FALSE(r.ok()) << "truncated to " << len;
    const std::string& e = r.error();
    EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("bad magic") != std::string::npos)
        << len << ": " << e;
  }
  auto r = f.load(f.bytes + "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("trailing bytes"), std::string::npos) << r.error();
}

TEST(CacheFile, EveryFlippedByteIsRefused) {
  ValidFile f;
  const size_t n = f.bytes.size();
  Rng rng(77);
  std::set<size_t> offsets = {0, 8, 12, 16, 40, 52, 60, 64, n - 1, n - 9};
  while (offsets.size() < 50) offsets.insert(rng.next() % n);
  for (size_t off : offsets) {
    std::string b = f.bytes;
    b[off] = static_cast<char>(b[off] ^ (1 << (off % 8)));
    auto r = f.load(b);
    ASSERT_FALSE(r.ok()) << "flipped byte " << off;
    EXPECT_FALSE(r.error().empty());
  }
  // A byte inside a layer's rows names that layer's section.
  std::string b = f.bytes;
  b[n - 100] ^= 0x10;
  auto r = f.load(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("layer 1 section: checksum mismatch"), std::string::npos) << r.error();
  b = f.bytes;
  auto h = read_cache_header(*memory_source(b.data(), b.size()));
  ASSERT_TRUE(h.ok());
  b[h->header_bytes + 8 + 4] ^= 0x01;  // the second token id
  r = f.load(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("token section: checksum mismatch"), std::string::npos) << r.error();
  b = f.bytes;
  b[20] ^= 0x01;  // inside the header
  r = f.load(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("header: checksum mismatch"), std::string::npos) << r.error();
}

TEST(CacheFile, AbsurdHeaderFieldsAreRefusedWithTheirNames) {
  ValidFile f;
  const std::string& b = f.bytes;
  // Header field offsets (FORMATS.md §4d): 8 version, 12 length, 16 model,
  // 24 policy, 32 seed, 40 n_layer, 44 n_kv_heads, 48 head_dim, 52 n_tokens,
  // 56 mean_rows, 60 layer 0 state, 61 K name length, 62 K name.
  struct Bad {
    std::string bytes, expect;
  };
  const std::vector<Bad> bad = {
      {patched<uint32_t>(b, 8, 2), "format version 2 is not supported"},
      {patched<uint32_t>(b, 12, 0x7fffffff), "header length 2147483647 is absurd"},
      {with_field<uint32_t>(b, 40, 1u << 20), "n_layer 1048576 is absurd"},
      {with_field<uint32_t>(b, 40, 0), "n_layer 0 is absurd"},
      {with_field<uint32_t>(b, 44, 100000), "n_kv_heads 100000 is absurd"},
      {with_field<uint32_t>(b, 48, 3), "head_dim 3 is absurd"},
      {with_field<uint32_t>(b, 52, 0x7fffffff), "n_tokens 2147483647 is absurd"},
      {with_field<uint32_t>(b, 52, 5000), "more than the context"},
      {with_field<uint32_t>(b, 52, 90), "the header describes"},
      {with_field<uint32_t>(b, 56, 0xffffffff), "mean_rows 4294967295 is absurd"},
      {with_field<uint8_t>(b, 60, 7), "state 7 is not 0, 1 or 2"},
      {with_field<uint8_t>(b, 61, 200), "does not fit the header"},
      {with_field<uint8_t>(b, 62, 'x'), "unknown"},  // "xq4"
      {with_field<uint64_t>(b, 16, 12345), "another model"},
      {with_field<uint64_t>(b, 24, 99), "a KV policy"},
      {with_field<uint64_t>(b, 32, 5), "codec seed 5"},
      {with_field<uint8_t>(b, 60, 1), "staging"},
  };
  for (const Bad& x : bad) {
    auto r = f.load(x.bytes);
    ASSERT_FALSE(r.ok()) << x.expect;
    EXPECT_NE(r.error().find(x.expect), std::string::npos) << "want '" << x.expect << "', got: " << r.error();
  }
  // A token id outside the vocabulary, with its section's checksum made valid.
  std::string t = b;
  auto h = read_cache_header(*memory_source(t.data(), t.size()));
  ASSERT_TRUE(h.ok());
  const int32_t huge = 1 << 30;
  std::memcpy(t.data() + h->header_bytes + 8 + 8, &huge, 4);
  const uint64_t sum = XXH64(t.data() + h->header_bytes + 8, h->section_bytes[0], 0);
  std::memcpy(t.data() + h->header_bytes + 8 + h->section_bytes[0], &sum, 8);
  auto r = f.load(t);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("token 2 has id 1073741824, outside the vocabulary"), std::string::npos) << r.error();
}

TEST(CacheFile, AnotherModelFormatPolicyOrCentringIsAMismatch) {
  ValidFile f;
  auto r = f.load(f.bytes, nullptr, models().other.get());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("another model"), std::string::npos) << r.error();
  KvCacheOptions co = f.co;
  co.type_k = "tq3";
  r = f.load(f.bytes, &co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("layer 0 K tq4 V tq4, this run K tq3 V tq4"), std::string::npos) << r.error();
  co = f.co;
  co.mean_center = false;
  r = f.load(f.bytes, &co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("mean centring over 64 rows, this run 0"), std::string::npos) << r.error();
  co = f.co;
  co.policy = small_policy();
  r = f.load(f.bytes, &co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("no KV policy"), std::string::npos) << r.error();
  co = f.co;
  co.seed = 1234;
  r = f.load(f.bytes, &co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("codec seed"), std::string::npos) << r.error();
  co = f.co;
  co.capacity = 99;
  r = f.load(f.bytes, &co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("holds 100 tokens, more than the context of 99"), std::string::npos) << r.error();
}

TEST(CacheFile, AnInterruptedWriteLeavesThePreviousFileIntact) {
  const Model& m = *models().model;
  const int V = m.config().n_vocab;
  ValidFile f;
  const std::string dir = testing::TempDir() + "tkv_cf_crash_" + std::to_string(getpid());
  fs::create_directories(dir);
  const std::string path = dir + "/c.tkvc";
  std::ofstream(path, std::ios::binary) << f.bytes;
  // Another cache (more tokens) whose write fails after k bytes.
  auto c = make_cache(f.co);
  const auto prompt = random_tokens(120, 4, V);
  std::vector<float> logits(V);
  ASSERT_TRUE(m.forward(prompt.data(), 120, 0, *c, 1, logits.data()).ok());
  const std::string full = temp_file("full.tkvc");
  ASSERT_TRUE(save_cache_file(full, *c, m.fingerprint(), prompt).ok());
  const uint64_t size = slurp(full).size();
  std::remove(full.c_str());
  for (uint64_t k : {uint64_t(0), uint64_t(1), uint64_t(15), uint64_t(24), uint64_t(100), size / 3, size / 2, size - 8, size - 1}) {
    CacheSaveOptions so;
    so.fail_after_bytes = k;
    Status s = save_cache_file(path, *c, m.fingerprint(), prompt, so);
    ASSERT_FALSE(s.ok()) << k;
    EXPECT_NE(s.message().find("simulated"), std::string::npos) << s.message();
    EXPECT_EQ(slurp(path), f.bytes) << "after a write failing at byte " << k;
    EXPECT_TRUE(f.load(slurp(path)).ok());
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file();
    EXPECT_EQ(entries, 1u) << "a temporary file was left behind";
  }
  // Then a write that completes replaces it.
  ASSERT_TRUE(save_cache_file(path, *c, m.fingerprint(), prompt).ok());
  auto r = f.load(slurp(path));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->tokens, prompt);
  fs::remove_all(dir);
}

TEST(CacheFile, TruncateKeepsOnlyWhatTheMeansAllow) {
  KvCacheOptions co;
  co.capacity = 100;
  auto c = make_cache(co);
  const Model& m = *models().model;
  const auto prompt = random_tokens(80, 8, m.config().n_vocab);
  std::vector<float> logits(m.config().n_vocab);
  ASSERT_TRUE(m.forward(prompt.data(), 80, 0, *c, 1, logits.data()).ok());
  EXPECT_EQ(c->mean_rows(), 64);
  EXPECT_EQ(c->keepable_prefix(70), 70);
  EXPECT_EQ(c->keepable_prefix(63), 0);
  EXPECT_FALSE(c->truncate(63).ok());
  EXPECT_FALSE(c->truncate(81).ok());
  ASSERT_TRUE(c->truncate(0).ok());
  EXPECT_EQ(c->n_tokens(), 0);
  EXPECT_FALSE(c->staging(0));
  EXPECT_EQ(c->mu_k(0), nullptr);  // means start again with the next sequence
  ASSERT_TRUE(m.forward(prompt.data(), 10, 0, *c, 1, logits.data()).ok());
  EXPECT_TRUE(c->staging(0));
}

// ---- the CLI ---------------------------------------------------------------

class CacheCli : public Cli {};

TEST_F(CacheCli, BuildInfoVerifyAndPromptCache) {
  CliResult r = run("gen-model --layers 2 --dim 64 --heads 4 --kv-heads 2 --head-dim 32 --ffn 96 -o '" + path("m.gguf") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat, then " + std::to_string(i * 7) + " dogs ran.\n";
  std::ofstream(path("doc.txt")) << text;
  const std::string m = "-m '" + path("m.gguf") + "'";
  r = run("cache build " + m + " -f '" + path("doc.txt") + "' -o '" + path("d.tkvc") + "' -ctk tq4 -ctv tq3 -b 100");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("prefill:"), std::string::npos) << r.err;  // no progress when stderr is not a terminal
  r = run("cache info '" + path("d.tkvc") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("K formats:     tq4 (all 2 layers)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("V formats:     tq3 (all 2 layers)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checksums:     ok"), std::string::npos) << r.out;
  r = run("cache info --json '" + path("d.tkvc") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j.at("bits_per_value").get<double>(), (4.0 + 0.5 + 3.0 + 0.5) / 2, 1e-9);  // d = 32: 16/32 bits of norm
  EXPECT_TRUE(j.at("checksums_ok").get<bool>());
  r = run("cache verify '" + path("d.tkvc") + "' " + m);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("loads for this model"), std::string::npos) << r.out;
  // A damaged file: verify and info fail naming the section.
  std::string b = slurp(path("d.tkvc"));
  b[b.size() - 50] ^= 0x40;
  std::ofstream(path("bad.tkvc"), std::ios::binary) << b;
  r = run("cache verify '" + path("bad.tkvc") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("layer 1 section: checksum mismatch"), std::string::npos) << r.err;
  r = run("cache info '" + path("bad.tkvc") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("checksum mismatch"), std::string::npos) << r.out;
  r = run("cache verify '" + path("m.gguf") + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("bad magic"), std::string::npos) << r.err;
  // run --prompt-cache: the first run saves, the second reuses all but the
  // last prompt token and writes the same text.
  const std::string pc = " --prompt-cache '" + path("p.tkvc") + "'";
  const std::string gen = "run " + m + " -n 12 --temp 0 -c 128";
  const std::string prompt = " -p 'the cat sat on the mat, then 7 dogs ran. the cat sat on the mat'";
  r = run(gen + prompt + pc);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("reused 0 of"), std::string::npos) << r.err;
  const std::string cold = r.out;
  r = run(gen + prompt + pc);
  ASSERT_EQ(r.rc, 0) << r.err;
  int reused = -1, total = -1;
  const size_t at = r.err.find("reused ");
  ASSERT_NE(at, std::string::npos) << r.err;
  ASSERT_EQ(std::sscanf(r.err.c_str() + at, "reused %d of %d prompt tokens", &reused, &total), 2);
  EXPECT_GT(total, 20);
  EXPECT_EQ(reused, total - 1);
  EXPECT_EQ(r.out, cold);
  // The same prompt from a file (-f): the same tokens, so the same reuse.
  std::ofstream(path("prompt.txt")) << "the cat sat on the mat, then 7 dogs ran. the cat sat on the mat";
  r = run(gen + " -f '" + path("prompt.txt") + "'" + pc);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("reused " + std::to_string(total - 1) + " of " + std::to_string(total)), std::string::npos) << r.err;
  EXPECT_EQ(r.out, cold);
  // Another cache format: reported, evaluated from scratch, the file replaced.
  r = run(gen + prompt + pc + " -ctk q8_0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("this run K q8_0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reused 0 of " + std::to_string(total)), std::string::npos) << r.err;
  // Read-only: used, not rewritten.
  const std::string before = slurp(path("p.tkvc"));
  r = run(gen + pc + " -ctk q8_0 --prompt-cache-ro -p 'the cat sat on the mat, then 7 dogs ran. the dog'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(slurp(path("p.tkvc")), before);
  // A short document (fewer tokens than the 64 rows of the means) built by
  // `cache build` is still staging, and loads into run's larger context.
  std::ofstream(path("short.txt")) << "the cat sat on the mat";
  r = run("cache build " + m + " -f '" + path("short.txt") + "' -o '" + path("s.tkvc") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run(gen + " -f '" + path("short.txt") + "' --prompt-cache '" + path("s.tkvc") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("from scratch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reused "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("reused 0 of"), std::string::npos) << r.err;
  r = run(gen + prompt + " --prompt-cache-ro");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--prompt-cache-ro needs --prompt-cache"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tkv
