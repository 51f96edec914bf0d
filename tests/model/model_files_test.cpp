// Issue 32, what a model file may hold: strict tensor accounting (every
// tensor used or on the runtime's list of knowingly skipped tensors), Llama
// 3's RoPE factors, YaRN, split files. Float64 references here take their
// configuration from this test, never from the engine's ModelConfig.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/gen_model.h"
#include "model/model.h"
#include "gguf_edit.h"
#include "shared_data.h"
#include "test_models.h"

namespace tkv {
namespace model_files {

std::string tmp(const std::string& name) {
  return testing::TempDir() + std::to_string(getpid()) + "_tkv_files_" + name;
}

// ---------------------------------------------------------------- 1. tensor accounting

TEST(TensorAccounting, AnUnknownTensorIsRefusedByName) {
  const std::string base = small_model(tmp("base.gguf")), odd = tmp("odd.gguf");
  auto f = gguf::File::open(base);
  ASSERT_TRUE(f.ok()) << f.error();
  {  // the copy alone loads: what refuses the variant is the one added tensor
    gguf::Writer w;
    copy_gguf(**f, w);
    ASSERT_TRUE(w.write(odd).ok());
    auto m = Model::load(odd);
    ASSERT_TRUE(m.ok()) << m.error();
  }
  gguf::Writer w;
  copy_gguf(**f, w);
  const std::vector<float> extra(64, 1.0f);
  ASSERT_TRUE(w.add_tensor("blk.1.attn_mystery.weight", {64}, 0, extra.data(), 256).ok());
  ASSERT_TRUE(w.write(odd).ok());
  auto m = Model::load(odd);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("'blk.1.attn_mystery.weight'"), std::string::npos) << m.error();
  EXPECT_NE(m.error().find("1 tensor is not used"), std::string::npos) << m.error();
  std::remove(base.c_str());
  std::remove(odd.c_str());
}

// qwen35's multi-token-prediction blocks (block_count includes them) are on
// the list: a file with one loads; the same tensor in a block that runs does not.
TEST(TensorAccounting, MultiTokenPredictionBlocksAreKnowinglySkipped) {
  GenModelOptions o;
  o.arch = "qwen35";
  o.layers = 4;
  const std::string base = tmp("q35.gguf"), mtp = tmp("q35_mtp.gguf");
  ASSERT_TRUE(generate_model(o, nullptr, base).ok());
  auto f = gguf::File::open(base);
  ASSERT_TRUE(f.ok()) << f.error();
  const std::vector<float> row(64, 0.5f);
  for (const char* name : {"blk.4.nextn.eh_proj.weight", "blk.3.nextn.eh_proj.weight"}) {
    gguf::Writer w;
    copy_gguf(**f, w, [](const std::string& k) { return k != "qwen35.block_count"; });
    w.add_u32("qwen35.block_count", 5);
    w.add_u32("qwen35.nextn_predict_layers", 1);
    ASSERT_TRUE(w.add_tensor(name, {64}, 0, row.data(), 256).ok());
    ASSERT_TRUE(w.write(mtp).ok());
    auto m = Model::load(mtp);
    if (std::string(name).rfind("blk.4", 0) == 0) {
      ASSERT_TRUE(m.ok()) << m.error();
      EXPECT_EQ((*m)->config().n_layer, 4);
    } else {
      ASSERT_FALSE(m.ok()) << "a tensor of a block that runs, read by no loader";
      EXPECT_NE(m.error().find(name), std::string::npos) << m.error();
    }
  }
  std::remove(base.c_str());
  std::remove(mtp.c_str());
}

TEST(TensorAccounting, EverySharedFileAndEveryGenModelArchitectureLoads) {
  for (const std::string arch : {"llama", "qwen2", "qwen3", "phi3", "qwen3moe", "gemma3", "qwen35", "qwen35moe"}) {
    GenModelOptions o;
    o.arch = arch;
    o.layers = 4;  // qwen35: three Gated DeltaNet layers and one attention layer
    if (arch == "phi3") o.rope_orig_ctx = 256;
    const std::string path = tmp("arch_" + arch + ".gguf");
    ASSERT_TRUE(generate_model(o, nullptr, path).ok()) << arch;
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << arch << ": " << m.error();
    std::remove(path.c_str());
  }
  TKV_NEED_SHARED("models/families/llama.gguf", "models/ref-5m/ref-5m-f16.gguf", "models/ref-5m/llama-quantized");
  std::vector<std::string> files;
  for (const char* dir : {"models/families", "models/ref-5m", "models/ref-5m/llama-quantized"})
    for (const auto& e : std::filesystem::directory_iterator(shared_path(dir)))
      if (e.path().extension() == ".gguf") files.push_back(e.path().string());
  EXPECT_GE(files.size(), 19u);
  for (const std::string& path : files) {
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << path << ": " << m.error();
  }
}


}  // namespace model_files
}  // namespace tkv
