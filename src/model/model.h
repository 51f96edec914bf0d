// model/: the transformer — architectures (arch.h), the forward pass, mixtures
// of experts, Gated DeltaNet, the sampler, prompt caches, gen-model. It sees
// util, codec, attention, cache, gguf, text and matmul; nothing above it.
//
// Transformer models from GGUF, one file per architecture behind one table
// (model/arch.h: llama, qwen2, qwen3, phi3, qwen3moe in arch_llama.cpp,
// gemma3, qwen35, smollm3, granite, olmo2), running attention on the compressed KV cache. The forward
// pass (forward.cpp) reads top to bottom in Model::run.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "gguf/gguf.h"
#include "model/delta_net.h"
#include "matmul/matmul.h"
#include "model/moe.h"
#include "text/tokenizer.h"
#include "util/huge_buffer.h"
#include "util/status.h"

namespace tkv {

// The widest head the loader accepts (the forward pass's stack buffers hold it).
constexpr int kMaxHeadDim = 1024;

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
  float rope_attn_factor = 1.0f;  // the file's rope.scaling.attn_factor
  // Llama 3's RoPE factors (rope_freqs.weight): one per rotated pair, each
  // dividing its pair's frequency, as llama.cpp's freq_factors; read by the
  // architectures whose llama.cpp loader reads them (rope_freqs set by the
  // architecture's entry), refused as an unused tensor by the others.
  bool rope_freqs = false;
  // YaRN (rope.scaling.type = yarn), as ggml's rope: per rotated pair i the
  // angle mixes the interpolated one (times 1/rope_scale) and the
  // extrapolated one by a ramp over the pairs between the correction dims
  // of beta_fast and beta_slow (ggml_rope_yarn_corr_dims with n_ctx_orig),
  // times yarn_ext_factor; cos and sin are scaled by rope_mscale times
  // (1 + 0.1 ln rope_scale) there. yarn_ext_factor 0: no YaRN.
  float yarn_ext_factor = 0.0f, yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  // What cos and sin are multiplied by (llama.cpp's cparams.yarn_attn_factor:
  // the file's attn_factor, for YaRN with its mscale corrections).
  float rope_mscale = 1.0f;
  // Mixture of experts (qwen3moe): 0 experts for a dense feed-forward.
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  int n_ff_shexp = 0;  // qwen35moe's shared expert (0: none)
  float expert_weights_scale = 0.0f;
  // Gemma: embeddings times sqrt(n_embd), norms after attention and the
  // feed-forward too, GELU (tanh) gating, a softmax scale of its own (0:
  // 1/sqrt(head_dim)); sliding-window layers with their own rotary base and
  // scale.
  float embd_scale = 0.0f;  // 0: none
  bool post_norms = false;
  bool gelu = false;        // GeGLU instead of SwiGLU
  float attn_scale = 0.0f;
  float final_softcap = 0.0f;  // logits = cap * tanh(logits / cap) when > 0
  float rope_base_swa = 10000.0f, rope_scale_swa = 1.0f;
  // Layers without RoPE (SmolLM3's every fourth, Granite's rope.scaling.finetuned
  // false): per layer, 1 for none (empty: every layer rotates).
  std::vector<char> no_rope;
  // Granite: attention and feed-forward outputs times residual_scale before
  // their residual add, logits divided by logit_scale (0: none of either).
  float residual_scale = 0.0f, logit_scale = 0.0f;
  // OLMo 2: Q and K RMS-normed as whole vectors over all heads (q_norm of
  // n_head * head_dim, k_norm of n_head_kv * head_dim), not per head.
  bool qk_norm_full = false;
  // Per layer: its sliding window (0: full attention) and its KV cache layer
  // (-1: a recurrent layer without one, qwen35's Gated DeltaNet).
  std::vector<int> window, kv_layer;
  // Qwen3.5 gated attention: attn_q gives each head's query and a gate;
  // the attention output is multiplied by sigmoid(gate).
  bool attn_gate = false;
  // Gated DeltaNet (qwen35's recurrent layers): key heads, value heads, their
  // dims, the causal convolution's width.
  int ssm_k_heads = 0, ssm_v_heads = 0, ssm_k_dim = 0, ssm_v_dim = 0, ssm_conv = 0;
  // The shape of the cache this model needs: its layers with a KV cache,
  // their windows, the recurrent state per sequence.
  KvShape kv_shape() const;
  int n_kv_layer() const;
  DeltaNetShape delta_shape() const { return {ssm_k_heads, ssm_v_heads, ssm_k_dim, ssm_v_dim, ssm_conv}; }
  // f32 values of one recurrent layer's state: conv (conv-1 inputs) + delta-rule matrices.
  size_t ssm_state_floats() const { return ssm_conv > 0 ? delta_shape().state_floats() : 0; }
  // One line on the layer stack: the kinds of layers and their counts
  // ("26 layers: 22 sliding-window (512 tokens), 4 full attention"), experts.
  std::string describe() const;
};

// One layer's weights (rows = 0 where absent).
struct LayerWeights {
  Matrix attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
  Matrix bq, bk, bv, q_norm, k_norm;
  Matrix post_attn_norm, post_ffn_norm;  // gemma3
  Matrix bo;                             // attention output bias (gpt-oss)
  std::vector<float> sinks;              // attention sinks per query head (gpt-oss), empty: none
  MoeWeights moe;                        // experts instead of w_gate/w_up/w_down (n_used > 0)
  // Gated DeltaNet (qwen35): the q/k/v projection (wqkv), the output gate z
  // (wz), per-head b (beta) and a (decay) projections, the convolution
  // [conv][channels], dt bias, A, the output norm and projection (wo).
  Matrix wqkv, wz, w_beta, w_alpha, conv, dt_bias, ssm_a, ssm_norm;
  DeltaNetWeights delta;  // conv, dt_bias, A and the norm as floats, once at load
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
  // The weight type holding most of the bytes ("Q8_0"), as benchmarks name a model.
  std::string weight_type() const;
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
  // `layer` is the cache layer (config().kv_layer[model layer]).
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
  using Layer = LayerWeights;
  friend struct ArchLoader;
  friend struct ForwardPass;  // forward.cpp
  Status run(const std::vector<BatchSeq>& seqs, int threads, bool all_logits, const KvObserver& observe) const;
  ModelConfig cfg_;
  std::shared_ptr<const gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
  Matrix tok_embd_, out_norm_, output_;
  std::vector<Layer> layers_;
  std::vector<float> rope_long_, rope_short_;  // Phi-3 LongRoPE factors (empty when absent)
  std::vector<float> rope_freqs_;              // Llama 3 RoPE factors (empty when absent)
  size_t weight_bytes_ = 0;
  HugeBuffer weights_;  // all weight bytes, copied out of the file onto huge pages
};

}  // namespace tkv
