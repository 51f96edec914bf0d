// Random-weight GGUF models of any shape, written as llama.cpp's converter
// would (same tensor names, metadata keys, layouts), for tests and benchmarks.
#pragma once
#include <cstdint>
#include <string>

#include "gguf/gguf.h"
#include "util/status.h"

namespace tkv {

struct GenModelOptions {
  std::string arch = "llama";  // llama, qwen2, qwen3, phi3 (fused attn_qkv and gate+up ffn_up), qwen3moe,
                               // gemma3, qwen35, qwen35moe, smollm3, granite, olmo2, gpt-oss
  int layers = 2, dim = 64, heads = 4, kv_heads = 2, head_dim = 16, ffn = 128;
  std::string type = "F32";    // F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
                               // (norms and biases stay F32)
  int ctx = 2048;
  float rope_base = 0.0f;      // 0: the architecture's (1e6 gemma3, 1e7 qwen35, else 1e4)
  int rope_dims = 0;           // rotated dims per head (0: head_dim; qwen35: head_dim / 4)
  uint64_t seed = 1;
  float weight_scale = 1.0f;   // multiplies the default init std (1/sqrt(fan_in))
  int vocab = 0;               // synthetic byte-level vocabulary size when no vocab file (>= 259)
  int rope_orig_ctx = 0;       // phi3: LongRoPE factors and original context (0: none)
  // llama: rope_freqs.weight as llama.cpp's converter writes it for Llama 3.1+
  // (factor 8, low-frequency factor 1, high-frequency factor 4) for this
  // original context (0: none).
  int llama3_rope_ctx = 0;
  // YaRN as converters write it (rope.scaling.type yarn, factor, original
  // context; the yarn_* keys left at their defaults): factor 0 for none.
  float yarn_factor = 0.0f;
  int yarn_orig_ctx = 0;
  // granite: embedding, residual, attention (softmax) and logit scales
  // (Granite 3's embedding 12, residual 0.22, logits 8; attention here 1/16).
  float embedding_scale = 12.0f, residual_scale = 0.22f, attention_scale = 0.0625f, logit_scale = 8.0f;
  int experts = 8, experts_used = 2;  // qwen3moe, qwen35moe (--ffn is each expert's width)
  int shared_ffn = 0;          // qwen35moe: the shared expert's width (0: --ffn)
  int window = 16, swa_period = 6;  // gemma3: sliding window, every period-th layer global
  // qwen35: Gated DeltaNet key heads, value heads, head dim (state size), conv
  // width; one layer in full_attn_interval has full attention.
  // gpt-oss: give the copied byte-level BPE vocabulary o200k_harmony's special
  // tokens and conventions (pre-tokenizer gpt-4o, BOS/EOS, a chat template
  // with harmony's markers).
  bool harmony_vocab = false;
  int ssm_groups = 2, ssm_v_heads = 4, ssm_state = 16, ssm_conv = 4, full_attn_interval = 4;
};

// Copies the tokenizer from `vocab` when given, else makes a small
// SentencePiece-style vocabulary (bytes plus a few pieces).
Status generate_model(const GenModelOptions& o, const gguf::File* vocab, const std::string& out_path);

}  // namespace tkv
