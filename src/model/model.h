// Transformer models from GGUF: llama (Llama 2/3, Mistral, TinyLlama, SmolLM),
// qwen2 (Q/K/V biases) and qwen3 (Q and K RMS norms), running attention on the
// compressed KV cache. The forward pass reads top to bottom in forward().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/gguf.h"
#include "model/matmul.h"
#include "model/moe.h"
#include "model/tokenizer.h"
#include "util/huge_buffer.h"
#include "util/status.h"

namespace tkv {

struct ModelConfig {
  std::string arch;
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int n_ctx_train = 0;
  float eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;    // linear scaling: positions are divided by this
  int rope_dims = 0;          // rotated dims per head (<= head_dim)
  bool rope_neox = false;     // pairs (i, i + dims/2) instead of (2i, 2i+1)
  bool qkv_bias = false, qk_norm = false;
  // Phi-3 LongRoPE (rope_factors_long/short.weight): angles divided by a
  // factor per rotated pair, the long factors for contexts beyond
  // n_ctx_orig (llama.cpp's choice by context size, here a sequence's cache
  // capacity); cos and sin scaled by rope_attn_factor.
  int n_ctx_orig = 0;
  float rope_attn_factor = 1.0f;
  // Mixture of experts (qwen3moe): 0 experts for a dense feed-forward.
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  float expert_weights_scale = 0.0f;
};

class Model {
 public:
  static Expected<std::unique_ptr<Model>> load(const std::string& path);
  // Builds the model on a parsed GGUF (its path() names it in errors).
  static Expected<std::unique_ptr<Model>> from_file(std::shared_ptr<const gguf::File> file);

  const ModelConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  const gguf::File& file() const { return *file_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // Identifies the model: a hash of its shape, tensor infos and a sample of
  // each tensor's bytes (binds KL base files and KV policies to it).
  uint64_t fingerprint() const;

  // Runs n tokens at positions [pos, pos + n) through the model, writing them
  // to the cache; logits of the last token go to `logits` (n_vocab), or of
  // every token when `all_logits` ([n][n_vocab]).
  // Logits with NaN or Inf are an error that names the position.
  // Called with each layer's K and V rows ([n][n_head_kv][head_dim], K after
  // RoPE) before they are written: what the cache stores, except that a row
  // with NaN or Inf reaches the observer as computed and is stored as zeros.
  using KvObserver = std::function<void(int layer, int pos, int n, const float* k, const float* v)>;
  Status forward(const int32_t* tokens, int n, int pos, KvCache& cache, int threads, float* logits,
                 bool all_logits = false, const KvObserver& observe = {}) const;

  // One sequence's share of a batched step: n tokens at positions
  // [pos, pos + n) of its own cache; the last token's logits go to `logits`
  // (n_vocab floats) unless it is null.
  struct BatchSeq {
    KvCache* cache = nullptr;
    const int32_t* tokens = nullptr;
    int n = 0, pos = 0;
    float* logits = nullptr;
    // Logits with NaN or Inf (broken weights, an overflowing activation) are
    // an error of the whole call, or, when this is set, reported here (true)
    // so that the other sequences of a server step go on.
    bool* nonfinite_logits = nullptr;
  };
  // Runs several sequences in one pass (a server step). Each weight matrix is
  // read once for all the one-token (decode) sequences together and once per
  // longer (prompt) sequence; attention runs per sequence on its own cache.
  // Every sequence gets bit for bit what forward() on it alone gives: decode
  // tokens go through matmul_tokens, a prompt through the same matmul as
  // alone. So greedy outputs do not depend on what else is in the step.
  Status forward_batch(const std::vector<BatchSeq>& seqs, int threads) const;

 private:
  struct Layer {
    Matrix attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    Matrix bq, bk, bv, q_norm, k_norm;  // optional (rows = 0 when absent)
    MoeWeights moe;                     // experts instead of w_gate/w_up/w_down (n_used > 0)
  };
  Status run(const std::vector<BatchSeq>& seqs, int threads, bool all_logits, const KvObserver& observe) const;
  ModelConfig cfg_;
  std::shared_ptr<const gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
  Matrix tok_embd_, out_norm_, output_;
  std::vector<Layer> layers_;
  std::vector<float> rope_long_, rope_short_;  // Phi-3 LongRoPE factors (empty when absent)
  size_t weight_bytes_ = 0;
  HugeBuffer weights_;  // all weight bytes, copied out of the file onto huge pages
};

}  // namespace tkv
