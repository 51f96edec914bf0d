// GGUF reader: real files, writer round trips, and malformed files (truncated
// at every offset, absurd counts, wrong types, offsets past the end), each of
// which must give a clean error naming what was wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "shared_data.h"

namespace tkv::gguf {
namespace {

std::string temp_path(const std::string& name) { return testing::TempDir() + std::to_string(getpid()) + "_tkv_gguf_" + name; }

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

Writer small_model() {
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_i32("some.signed", -7);
  w.add_u64("some.u64", 1ull << 40);
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hello"});
  w.add_f32_array("tokenizer.ggml.scores", {0.f, 0.f, 0.f, -1.5f});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1});
  std::vector<float> a(8 * 4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.5f;
  EXPECT_TRUE(w.add_tensor("a.weight", {8, 4}, 0, a.data(), a.size() * 4).ok());
  std::vector<uint8_t> q(34 * 2, 0x11);
  EXPECT_TRUE(w.add_tensor("q.weight", {32, 2}, 8, q.data(), q.size()).ok());
  return w;
}

TEST(Gguf, WriterRoundTripsEveryValueKindAndTensorData) {
  const auto path = temp_path("roundtrip.gguf");
  ASSERT_TRUE(small_model().write(path).ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.error();
  const File& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(*g.get_string("general.architecture"), "llama");
  EXPECT_EQ(*g.get_uint("llama.block_count"), 1u);
  EXPECT_FLOAT_EQ(static_cast<float>(*g.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(g.find("tokenizer.ggml.add_bos_token")->u, 1u);
  EXPECT_EQ(g.find("some.signed")->i, -7);
  EXPECT_FALSE(g.get_uint("some.signed").ok());  // negative: not a count
  EXPECT_EQ(*g.get_uint("some.u64"), 1ull << 40);
  const Value* toks = g.find("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks);
  ASSERT_EQ(toks->strings.size(), 4u);
  EXPECT_EQ(toks->strings[3], "hello");
  EXPECT_FLOAT_EQ(static_cast<float>(g.find("tokenizer.ggml.scores")->num(3)), -1.5f);
  EXPECT_EQ(g.find("tokenizer.ggml.token_type")->inum(0), 2);
  const Tensor* t = g.tensor("a.weight");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->n_elements, 32u);
  float v;
  std::memcpy(&v, t->data + 4 * 5, 4);
  EXPECT_EQ(v, 2.5f);
  // The data section starts at the first multiple of the alignment after the
  // tensor infos, and each tensor's bytes are at data_offset + offset of the
  // file (read here independently of the reader).
  EXPECT_EQ(g.data_offset() % g.alignment(), 0u);
  EXPECT_EQ(g.alignment(), 32u);
  std::ifstream raw(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(raw), {}};
  ASSERT_EQ(bytes.size(), g.size());
  const Tensor* q = g.tensor("q.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->n_bytes, 68u);
  EXPECT_EQ(q->offset % g.alignment(), 0u);
  EXPECT_GE(q->offset, t->n_bytes);  // after a.weight's 128 bytes
  for (const Tensor* x : {t, q}) {
    ASSERT_LE(g.data_offset() + x->offset + x->n_bytes, bytes.size());
    EXPECT_EQ(std::memcmp(x->data, bytes.data() + g.data_offset() + x->offset, x->n_bytes), 0) << x->name;
  }
  EXPECT_EQ(q->data[0], 0x11);
  EXPECT_EQ(q->data[67], 0x11);
  // Type errors name the key and the type found.
  auto bad = g.get_string("llama.block_count");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("llama.block_count"), std::string::npos);
  EXPECT_NE(bad.error().find("u32"), std::string::npos);
  EXPECT_FALSE(g.get_uint("missing.key").ok());
  std::remove(path.c_str());
}

TEST(Gguf, TruncatedAtEveryOffsetGivesACleanError) {
  const auto full = small_model().bytes();
  const auto path = temp_path("trunc.gguf");
  // Where the last tensor's bytes end (the alignment padding after it is optional).
  write_bytes(path, full);
  size_t end = 0;
  {
    auto f = File::open(path);
    ASSERT_TRUE(f.ok());
    for (const auto& t : (*f)->tensors()) end = std::max<size_t>(end, (*f)->data_offset() + t.offset + t.n_bytes);
  }
  for (size_t cut = 0; cut < end; ++cut) {
    if (cut > 0 && cut < end - 200 && cut % 3 != 0) continue;  // all of the tail, a third of the rest
    write_bytes(path, std::vector<uint8_t>(full.begin(), full.begin() + cut));
    auto f = File::open(path);
    ASSERT_FALSE(f.ok()) << "cut at " << cut << " of " << full.size();
    EXPECT_NE(f.error().find(path), std::string::npos) << f.error();
  }
  std::remove(path.c_str());
}

// Patches a little-endian field of the file image at byte `at`.
template <class T>
std::vector<uint8_t> patched(std::vector<uint8_t> b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
  return b;
}

size_t find_bytes(const std::vector<uint8_t>& b, const std::string& s) {
  for (size_t i = 0; i + s.size() <= b.size(); ++i)
    if (std::memcmp(b.data() + i, s.data(), s.size()) == 0) return i;
  return std::string::npos;
}

void expect_error(const std::vector<uint8_t>& b, const std::string& needle, const char* what) {
  const auto path = temp_path("bad.gguf");
  write_bytes(path, b);
  auto f = File::open(path);
  ASSERT_FALSE(f.ok()) << what;
  EXPECT_NE(f.error().find(needle), std::string::npos) << what << ": " << f.error();
  std::remove(path.c_str());
}

TEST(Gguf, MalformedHeadersCountsTypesAndOffsetsAreErrors) {
  const auto good = small_model().bytes();
  expect_error(patched<uint32_t>(good, 0, 0x12345678), "not a GGUF file", "magic");
  expect_error(patched<uint32_t>(good, 4, 1), "version 1", "version 1");
  expect_error(patched<uint32_t>(good, 4, 99), "version 99", "version 99");
  expect_error(patched<uint64_t>(good, 8, 1ull << 60), "tensor count", "absurd tensor count");
  expect_error(patched<uint64_t>(good, 16, 1ull << 60), "metadata count", "absurd metadata count");
  // First key's string length (at byte 24) made absurd.
  expect_error(patched<uint64_t>(good, 24, 1ull << 62), "runs past the end", "absurd key length");
  // The type of the first key ("general.architecture", 20 bytes) made unknown.
  expect_error(patched<uint32_t>(good, 24 + 8 + 20, 77), "unknown type 77", "unknown value type");
  // Array count of the token list made absurd.
  const size_t tok = find_bytes(good, "tokenizer.ggml.tokens");
  ASSERT_NE(tok, std::string::npos);
  expect_error(patched<uint64_t>(good, tok + 21 + 4 + 4, 1ull << 61), "array count", "absurd array count");
  // Tensor info of a.weight: name, n_dims, dims, type, offset.
  const size_t tn = find_bytes(good, "a.weight");
  ASSERT_NE(tn, std::string::npos);
  const size_t nd = tn + 8, d0 = nd + 4, ty = d0 + 16, off = ty + 4;
  expect_error(patched<uint32_t>(good, nd, 9), "dimensions", "too many dims");
  expect_error(patched<uint64_t>(good, d0, 0), "out of range", "zero dim");
  expect_error(patched<uint64_t>(good, d0, 1ull << 50), "out of range", "absurd dim");
  expect_error(patched<uint32_t>(good, ty, 1234), "tensor type id 1234", "unknown tensor type");
  expect_error(patched<uint64_t>(good, off, 3), "not aligned", "unaligned offset");
  expect_error(patched<uint64_t>(good, off, 1ull << 40), "runs past the end", "offset past end");
  // Q8_0 tensor with a first dim that is not a multiple of 32.
  const size_t qn = find_bytes(good, "q.weight");
  expect_error(patched<uint64_t>(good, qn + 8 + 4, 33), "block size", "bad block multiple");
  // A bool that is neither 0 nor 1.
  const size_t bk = find_bytes(good, "tokenizer.ggml.add_bos_token");
  expect_error(patched<uint8_t>(good, bk + 28 + 4, 7), "bool", "bad bool");
  // Not a file at all / missing.
  auto missing = File::open(temp_path("does-not-exist.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("cannot open"), std::string::npos);
}

TEST(Gguf, RealTinyLlamaLoads) {
  const std::string path = std::string(TKV_SHARED_DIR) + "/data/gguf/llama-2-tiny-random.gguf";
  TKV_NEED_SHARED(path);
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.error();
  const File& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(*g.get_string("general.architecture"), "llama");
  EXPECT_EQ(*g.get_uint("llama.embedding_length"), 8u);
  EXPECT_EQ(*g.get_uint("llama.block_count"), 1u);
  EXPECT_EQ(*g.get_uint("llama.attention.head_count"), 2u);
  EXPECT_EQ(g.find("tokenizer.ggml.tokens")->strings.size(), 32000u);
  EXPECT_EQ(g.find("tokenizer.ggml.tokens")->strings[1], "<s>");
  EXPECT_EQ(g.tensors().size(), 12u);
  const Tensor* emb = g.tensor("token_embd.weight");
  ASSERT_TRUE(emb);
  EXPECT_EQ(std::string(emb->info().name), "F16");
  EXPECT_EQ(emb->dims[0], 8u);
  EXPECT_EQ(emb->dims[1], 32000u);
  EXPECT_EQ(std::string(g.tensor("blk.0.attn_norm.weight")->info().name), "F32");
  // Norm weights of a llama.cpp-converted model are finite floats.
  const Tensor* nrm = g.tensor("output_norm.weight");
  for (uint64_t i = 0; i < nrm->n_elements; ++i) {
    float x;
    std::memcpy(&x, nrm->data + 4 * i, 4);
    EXPECT_TRUE(std::isfinite(x));
  }
}

TEST(Gguf, RealVocabAndModelFilesLoad) {
  TKV_NEED_SHARED("data/tokenizer/ggml-vocab-llama-spm.gguf", "data/tokenizer/ggml-vocab-gpt-2.gguf",
                  "data/tokenizer/ggml-vocab-starcoder.gguf", "data/tokenizer/ggml-vocab-falcon.gguf",
                  "data/tokenizer/ggml-vocab-phi-3.gguf", "data/tokenizer/ggml-vocab-deepseek-llm.gguf",
                  "models/ref-5m/ref-5m-f16.gguf");
  const std::string dir = std::string(TKV_SHARED_DIR);
  for (const char* rel : {"/data/tokenizer/ggml-vocab-llama-spm.gguf", "/data/tokenizer/ggml-vocab-gpt-2.gguf",
                          "/data/tokenizer/ggml-vocab-starcoder.gguf", "/data/tokenizer/ggml-vocab-falcon.gguf",
                          "/data/tokenizer/ggml-vocab-phi-3.gguf", "/data/tokenizer/ggml-vocab-deepseek-llm.gguf",
                          "/models/ref-5m/ref-5m-f16.gguf"}) {
    const std::string path = dir + rel;
    auto f = File::open(path);
    ASSERT_TRUE(f.ok()) << f.error();
    EXPECT_TRUE((*f)->get_string("tokenizer.ggml.model").ok()) << path;
  }
}

}  // namespace
}  // namespace tkv::gguf
