// The shape of a model as the float64 reference forwards in the tests see it:
// read here from the GGUF's own keys (llama.cpp's names), with the rotary
// pairing of each architecture written out from llama.cpp's table
// (llama_model_rope_type: LLAMA rotates adjacent pairs, the others NEOX
// halves). Never the engine's ModelConfig: a reference that reads the
// engine's parsed config shares its mistakes (issue 34: forcing the wrong
// rotation on qwen2/qwen3/phi3/qwen3moe passed every family test).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf.h"

namespace tkv {

struct RefConfig {
  std::string arch;
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0;
  int rope_dims = 0;
  double rope_base = 10000, rope_scale = 1, eps = 0;
  bool rope_neox = false;
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  int ssm_k_heads = 0, ssm_v_heads = 0, ssm_k_dim = 0, ssm_v_dim = 0, ssm_conv = 0;
};

inline RefConfig ref_config(const gguf::File& f) {
  RefConfig c;
  c.arch = f.get_string_or("general.architecture", "");
  const std::string a = c.arch + ".";
  auto u = [&](const std::string& key, uint64_t fallback) { return static_cast<int>(f.get_uint_or(a + key, fallback)); };
  c.n_layer = u("block_count", 0);
  c.n_embd = u("embedding_length", 0);
  c.n_head = u("attention.head_count", 0);
  c.n_head_kv = u("attention.head_count_kv", uint64_t(c.n_head));
  c.head_dim = u("attention.key_length", c.n_head ? uint64_t(c.n_embd / c.n_head) : 0);
  c.rope_dims = u("rope.dimension_count", uint64_t(c.head_dim));
  c.rope_base = f.get_float_or(a + "rope.freq_base", 10000.0);
  if (f.get_string_or(a + "rope.scaling.type", "none") == "linear")
    c.rope_scale = f.get_float_or(a + "rope.scaling.factor", 1.0);  // llama.cpp: freq_scale = 1 / factor
  auto eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  EXPECT_TRUE(eps.ok()) << "reference config: " << eps.error();
  c.eps = eps.ok() ? *eps : 0.0;
  // llama.cpp's llama_model_rope_type: LLAMA_ROPE_TYPE_NORM for llama,
  // smollm3 and granite, NEOX for the others here (olmo2, gpt-oss; qwen35's
  // multi-section rope at one position per token is NEOX rotation).
  c.rope_neox = c.arch != "llama" && c.arch != "smollm3" && c.arch != "granite";
  if (const gguf::Value* t = f.find("tokenizer.ggml.tokens")) c.n_vocab = static_cast<int>(t->count);
  c.n_expert = u("expert_count", 0);
  c.n_expert_used = u("expert_used_count", 0);
  c.n_ff_exp = u("expert_feed_forward_length", 0);
  c.ssm_conv = u("ssm.conv_kernel", 0);
  c.ssm_k_dim = u("ssm.state_size", 0);
  c.ssm_k_heads = u("ssm.group_count", 0);
  c.ssm_v_heads = u("ssm.time_step_rank", 0);
  c.ssm_v_dim = c.ssm_v_heads ? u("ssm.inner_size", 0) / c.ssm_v_heads : 0;
  return c;
}

}  // namespace tkv
