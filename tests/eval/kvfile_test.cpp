// The KV vector file: exact round trips, and every malformed file (short, bad
// magic, absurd or zero dims, trailing bytes) rejected with a message that names
// the file and the field, never a crash.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "eval/kv_file.h"
#include "util/rng.h"
#include "shared_data.h"

namespace tkv {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test (tests may run in parallel processes).
class KvFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tkv_kvfile_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

KvFile sample(uint32_t heads, uint32_t tokens, uint32_t d, uint64_t seed) {
  KvFile kv;
  kv.layer = 7;
  kv.kv_heads = heads;
  kv.tokens = tokens;
  kv.head_dim = d;
  Rng rng(seed);
  kv.data.resize(kv.values());
  for (auto& v : kv.data) v = static_cast<float>(rng.gaussian() * 3);
  return kv;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string header(uint32_t magic, uint32_t layer, uint32_t heads, uint32_t tokens, uint32_t d) {
  std::string h;
  for (uint32_t v : {magic, layer, heads, tokens, d})
    for (int i = 0; i < 4; ++i) h += static_cast<char>(v >> (8 * i));
  return h;
}

TEST_F(KvFileTest, RoundTripIsBitExactIncludingSpecialValues) {
  KvFile kv = sample(3, 5, 16, 1);
  kv.data[0] = -0.0f;
  kv.data[1] = std::numeric_limits<float>::denorm_min();
  kv.data[2] = std::numeric_limits<float>::quiet_NaN();  // loads; the codec reports it later
  kv.data[3] = -std::numeric_limits<float>::infinity();
  ASSERT_TRUE(write_kv_file(path("a.bin"), kv).ok());
  auto back = read_kv_file(path("a.bin"));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->layer, 7u);
  EXPECT_EQ(back->kv_heads, 3u);
  EXPECT_EQ(back->tokens, 5u);
  EXPECT_EQ(back->head_dim, 16u);
  ASSERT_EQ(back->data.size(), kv.data.size());
  EXPECT_EQ(0, std::memcmp(back->data.data(), kv.data.data(), kv.data.size() * 4));
  // [head][token][dim]: head(1) starts after tokens * d values.
  EXPECT_EQ(back->head(1), back->data.data() + 5 * 16);
}

TEST_F(KvFileTest, WritesTheDocumentedLittleEndianLayout) {
  KvFile kv = sample(2, 3, 8, 2);
  kv.data[0] = 1.0f;  // 0x3F800000
  ASSERT_TRUE(write_kv_file(path("a.bin"), kv).ok());
  const std::string bytes = slurp(path("a.bin"));
  ASSERT_EQ(bytes.size(), 20u + 2 * 3 * 8 * 4);
  EXPECT_EQ(bytes.substr(0, 20), header(0x544B5651, 7, 2, 3, 8));
  EXPECT_EQ(bytes.substr(20, 4), std::string("\x00\x00\x80\x3F", 4));
}

TEST_F(KvFileTest, TruncatedFilesAreRejectedAtEveryKindOfOffset) {
  const KvFile kv = sample(2, 4, 8, 3);
  ASSERT_TRUE(write_kv_file(path("full.bin"), kv).ok());
  const std::string full = slurp(path("full.bin"));
  for (size_t len : {size_t{0}, size_t{1}, size_t{4}, size_t{19}, size_t{20}, size_t{21}, size_t{24},
                     full.size() / 2, full.size() - 4, full.size() - 1}) {
    spit(path("cut.bin"), full.substr(0, len));
    auto r = read_kv_file(path("cut.bin"));
    ASSERT_FALSE(r.ok()) << "length " << len;
    EXPECT_NE(r.error().find(path("cut.bin")), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("truncated"), std::string::npos) << r.error();
    if (len >= 20) {  // the message says what the header implies
      EXPECT_NE(r.error().find(std::to_string(full.size())), std::string::npos) << r.error();
    }
  }
}

TEST_F(KvFileTest, TrailingBytesAreRejected) {
  ASSERT_TRUE(write_kv_file(path("a.bin"), sample(1, 2, 8, 4)).ok());
  spit(path("a.bin"), slurp(path("a.bin")) + "xyz");
  auto r = read_kv_file(path("a.bin"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("trailing"), std::string::npos) << r.error();
}

TEST_F(KvFileTest, WrongMagicIsNamed) {
  std::string bytes = header(0x46554747, 0, 1, 1, 8) + std::string(32, '\0');  // "GGUF"
  spit(path("g.bin"), bytes);
  auto r = read_kv_file(path("g.bin"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find(path("g.bin")), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("magic"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("0x544B5651"), std::string::npos) << r.error();
}

TEST_F(KvFileTest, AbsurdOrZeroDimensionsNameTheField) {
  struct Case { uint32_t heads, tokens, d; const char* field; };
  for (const Case& c : {Case{1, 1, 1u << 30, "head_dim"}, Case{1, 1, 0, "head_dim"},
                        Case{0, 4, 8, "kv_heads"}, Case{1u << 31, 1, 8, "kv_heads"}, Case{2, 0, 8, "tokens"}}) {
    spit(path("x.bin"), header(0x544B5651, 0, c.heads, c.tokens, c.d) + std::string(64, '\0'));
    auto r = read_kv_file(path("x.bin"));
    ASSERT_FALSE(r.ok()) << c.field;
    EXPECT_NE(r.error().find(c.field), std::string::npos) << r.error();
    EXPECT_NE(r.error().find(path("x.bin")), std::string::npos) << r.error();
  }
  // Huge but individually plausible dims: the size check catches them without
  // allocating (4096 x 2^32 x 65536 floats would overflow 64 bits).
  spit(path("y.bin"), header(0x544B5651, 0, 4096, 0xFFFFFFFFu, 65536) + std::string(64, '\0'));
  auto r = read_kv_file(path("y.bin"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("truncated"), std::string::npos) << r.error();
}

TEST_F(KvFileTest, MissingFileAndUnwritablePathAreErrors) {
  auto r = read_kv_file(path("nope.bin"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find(path("nope.bin")), std::string::npos) << r.error();
  Status s = write_kv_file(path("no/such/dir/a.bin"), sample(1, 1, 8, 5));
  EXPECT_FALSE(s.ok());
  KvFile bad = sample(1, 2, 8, 6);
  bad.data.pop_back();
  EXPECT_FALSE(write_kv_file(path("b.bin"), bad).ok());
}

// Any valid file round-trips; any strict prefix of it is rejected, never a crash.
RC_GTEST_PROP(KvFileProperty, RoundTripAndEveryPrefixRejected, ()) {
  const auto heads = *rc::gen::inRange<uint32_t>(1, 4);
  const auto tokens = *rc::gen::inRange<uint32_t>(1, 6);
  const auto d = *rc::gen::inRange<uint32_t>(1, 12);
  KvFile kv;
  kv.layer = *rc::gen::arbitrary<uint32_t>();
  kv.kv_heads = heads;
  kv.tokens = tokens;
  kv.head_dim = d;
  const auto bits = *rc::gen::container<std::vector<uint32_t>>(kv.values(), rc::gen::arbitrary<uint32_t>());
  kv.data.resize(kv.values());
  std::memcpy(kv.data.data(), bits.data(), bits.size() * 4);
  const fs::path p = fs::temp_directory_path() / ("tkv_kvprop_" + std::to_string(getpid()) + ".bin");
  RC_ASSERT(write_kv_file(p.string(), kv).ok());
  auto back = read_kv_file(p.string());
  RC_ASSERT(back.ok());
  RC_ASSERT(back->layer == kv.layer);
  RC_ASSERT(std::memcmp(back->data.data(), kv.data.data(), kv.data.size() * 4) == 0);
  const std::string full = slurp(p.string());
  const auto len = *rc::gen::inRange<size_t>(0, full.size());
  spit(p.string(), full.substr(0, len));
  RC_ASSERT(!read_kv_file(p.string()).ok());
  fs::remove(p);
}

TEST(KvFileReal, QwenFilesLoadWithTheDocumentedHeader) {
  TKV_NEED_SHARED("data/kv/qwen3.5-0.8b/layer3_keys.bin", "data/kv/qwen3.5-0.8b/layer7_keys.bin", "data/kv/qwen3.5-0.8b/layer3_values.bin", "data/kv/qwen3.5-0.8b/layer7_values.bin");
  for (const char* name : {"layer3_keys.bin", "layer3_values.bin", "layer7_keys.bin", "layer7_values.bin"}) {
    const std::string p = std::string(TKV_SHARED_DIR) + "/data/kv/qwen3.5-0.8b/" + name;
    auto kv = read_kv_file(p);
    ASSERT_TRUE(kv.ok()) << kv.error();
    EXPECT_EQ(kv->kv_heads, 2u);
    EXPECT_EQ(kv->tokens, 99u);
    EXPECT_EQ(kv->head_dim, 256u);
    for (float v : kv->data) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

}  // namespace
}  // namespace tkv
