// The architectures, one file each behind one table (as llama.cpp's
// src/models/): each names its GGUF `general.architecture`, reads its own
// metadata after the keys every architecture shares (model.cpp) and loads
// one layer's tensors. The forward pass (forward.cpp) runs every architecture
// from the ModelConfig features and LayerWeights these fill in.
#pragma once
#include <string>
#include <vector>

#include "model/model.h"

namespace tkv {

// What an architecture's loader works with: the file, the config being
// filled, and checked readers that name the key or tensor in their errors.
struct ArchLoader {
  const gguf::File& g;
  const std::string& path;
  ModelConfig& c;
  Model& m;
  // Which of the file's tensors (by index in g.tensors()) a loader read:
  // after loading, every other tensor must be on the list of tensors the
  // runtime knowingly skips (model.cpp, skipped_tensor), or the file is refused.
  std::vector<char>& used;
  // A required count `<arch>.key` in 1 .. 2^24.
  Expected<int> need(const std::string& key) const;
  // An optional count, `fallback` when absent, in [lo, hi].
  Expected<int> optional(const std::string& key, uint64_t fallback, uint64_t lo, uint64_t hi) const;
  // A matrix of exactly cols x rows (a vector: rows 1); absent and optional: rows 0.
  Expected<Matrix> tensor(const std::string& name, int64_t cols, int64_t rows, bool optional = false) const;
  // Layer il's tensor "blk.<il>.<name>" into dst (rows 0 when optional and absent).
  Status load(Matrix& dst, int il, const std::string& name, int64_t cols, int64_t rows, bool optional = false) const;
  // A 3-D tensor [cols, rows, n] as n matrices (a mixture's experts).
  Expected<std::vector<Matrix>> experts(const std::string& name, int64_t cols, int64_t rows, int64_t n) const;
  Status error(const std::string& what) const { return Status::Error(path + ": " + what); }
  void mark_used(const gguf::Tensor* t) const { used[static_cast<size_t>(t - g.tensors().data())] = 1; }
};

struct ArchSpec {
  const char* name;
  // The architecture's own metadata and features, after the shared keys.
  Status (*hparams)(const ArchLoader&);
  // Layer il's tensors ("blk.<il>.").
  Status (*layer)(const ArchLoader&, int il, LayerWeights& L);
};

const ArchSpec* find_arch(const std::string& name);
std::string arch_names();  // "llama, qwen2, ..." for errors

// Rows r0 .. r0 + n of a matrix (a part of a fused tensor).
Matrix row_range(const Matrix& m, int64_t r0, int64_t n);

// The per-architecture entries (arch_*.cpp).
extern const ArchSpec kArchLlama, kArchQwen2, kArchQwen3, kArchPhi3, kArchQwen3Moe, kArchGemma3, kArchQwen35,
    kArchQwen35Moe, kArchSmolLM3, kArchGranite, kArchOlmo2, kArchGptOss;

// Loads the attention tensors every attention layer has: norm, Q/K/V (or a
// fused attn_qkv), output, optional biases and Q/K norms (qk_norm).
Status load_attention(const ArchLoader& a, int il, LayerWeights& L, int q_rows);
// The feed-forward's norm (`norm`, its name) and its dense gate/up/down (or
// Phi-3's fused gate+up), or the experts when c.n_expert > 0.
Status load_ffn(const ArchLoader& a, int il, LayerWeights& L, const char* norm);
// The experts' counts and width (qwen3moe, qwen35moe).
Status arch_moe_hparams(const ArchLoader& a);

}  // namespace tkv
