// Gated DeltaNet, the linear-attention token mixer of qwen35's recurrent
// layers (docs/ARCHITECTURE.md, "Gated DeltaNet"), as llama.cpp computes it.
// Per token t, from the layer's projections of the normed input:
//   mixed = W_qkv x -> causal depthwise conv over the last `conv` tokens
//   (the previous conv-1 inputs are the conv state), SiLU, split [q | k | v]
//   q, k per key head: L2-normalised (x / max(|x|, eps)); q / sqrt(k_dim)
//   per value head h (its key head h % k_heads, llama.cpp's tiled order):
//     beta = sigmoid(b_h), g = A_h * softplus(alpha_h + dt_bias_h)  (A < 0)
//     S <- exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q
//     o <- rmsnorm(o) * norm_w * silu(z_h)
// S is k_dim x v_dim per value head, kept in f32 with the conv inputs as the
// sequence's recurrent state. A prompt runs in chunks of 64 tokens (the WY
// form llama.cpp and the reference implementation use), equal to the
// token-by-token recurrence up to rounding; one token runs the recurrence.
#pragma once
#include <cstddef>
#include <vector>

#include "matmul/matmul.h"

namespace tkv {

struct DeltaNetShape {
  int k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0, conv = 0;
  int channels() const { return 2 * k_heads * k_dim + v_heads * v_dim; }  // of mixed: q, k, v
  size_t conv_state() const { return size_t(conv - 1) * channels(); }
  size_t state_floats() const { return conv_state() + size_t(v_heads) * k_dim * v_dim; }
};

// The small per-layer tensors as floats: conv [channels][conv] (the last
// column multiplies the current token), dt_bias and A [v_heads], norm [v_dim].
struct DeltaNetWeights {
  std::vector<float> conv, dt_bias, a, norm;
};
DeltaNetWeights delta_net_weights(const Matrix& conv, const Matrix& dt_bias, const Matrix& a, const Matrix& norm,
                                  const DeltaNetShape& s);

enum class DeltaMode { kAuto, kRecurrent, kChunked };

// n tokens of one sequence: mixed [n][channels], z [n][v_heads * v_dim],
// b and alpha [n][v_heads]; state (state_floats, zero for a new sequence) is
// read and advanced; out [n][v_heads * v_dim] is the gated-norm output
// (before the output projection). Value heads run on `threads` threads.
void delta_net(const DeltaNetShape& s, const DeltaNetWeights& w, int n, const float* mixed, const float* z,
               const float* b, const float* alpha, float eps, float* state, float* out, int threads,
               DeltaMode mode = DeltaMode::kAuto);

}  // namespace tkv
