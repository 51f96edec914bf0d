// Small random-weight models on disk for tests that need a model but not a
// particular one (hardening, C API, surfaces), and broken ones: NaN written
// into one float of an F32 tensor.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include "model/gen_model.h"
#include "gguf/gguf.h"

namespace tkv {

inline void poison_gguf(const std::string& path, const std::string& tensor, uint64_t index = 0) {
  uint64_t at = 0;
  {
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.ok()) << f.error();
    const gguf::Tensor* t = (*f)->tensor(tensor);
    ASSERT_NE(t, nullptr) << tensor;
    ASSERT_EQ(t->type, 0u) << tensor << " is not F32";
    at = (*f)->data_offset() + t->offset + index * 4;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
  io.seekp(static_cast<std::streamoff>(at));
  io.write(reinterpret_cast<const char*>(&nan), 4);
}

// 2 layers, dim 64, 4 heads on 2 KV heads of 16, F32 weights; `nan_tensor`
// (if set) gets NaN in its first element.
inline std::string small_model(const std::string& path, const std::string& nan_tensor = "") {
  GenModelOptions g;
  g.layers = 2;
  g.dim = 64;
  g.heads = 4;
  g.kv_heads = 2;
  g.head_dim = 16;
  g.ffn = 128;
  EXPECT_TRUE(generate_model(g, nullptr, path).ok());
  if (!nan_tensor.empty()) poison_gguf(path, nan_tensor);
  return path;
}

// The evaluation tools' tests' model: 2 layers, dim 64, 4 heads on 2 KV heads
// of 32, feed-forward 96, F32 weights.
inline GenModelOptions eval_model_options() {
  GenModelOptions o;
  o.layers = 2;
  o.dim = 64;
  o.heads = 4;
  o.kv_heads = 2;
  o.head_dim = 32;
  o.ffn = 96;
  return o;
}

// A random model of an architecture and weight type: 2 layers, dim 256, 4
// heads on 2 KV heads of 64, feed-forward width ffn (each expert's for
// qwen3moe).
inline GenModelOptions random_model_options(const std::string& arch, const std::string& type, int ffn) {
  GenModelOptions g;
  g.arch = arch;
  g.type = type;
  g.layers = 2;
  g.dim = 256;
  g.heads = 4;
  g.kv_heads = 2;
  g.head_dim = 64;
  g.ffn = ffn;
  return g;
}

}  // namespace tkv
