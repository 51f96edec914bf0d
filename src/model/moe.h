// Mixture-of-experts feed-forward (qwen3moe, as llama.cpp's build_moe_ffn
// with softmax gating): a router row per expert, the top k experts of
// softmax(router · h) per token, their weights renormalised to sum 1 (and
// multiplied by expert_weights_scale when the file sets one), and
//   y = Σ_k w_k · down_k(silu(gate_k · h) ⊙ up_k · h)
// plus, where the model has one, a shared expert weighted by a sigmoid gate.
// Tokens are grouped by expert, so each expert's weights are read once per
// call for the tokens that chose it and not at all when none did.
#pragma once
#include <functional>
#include <vector>

#include "matmul/matmul.h"
#include "util/status.h"

namespace tkv {

struct MoeWeights {
  Matrix router;                               // [n_embd cols, n_expert rows]
  std::vector<Matrix> gate, up, down;          // per expert: [n_embd, n_ff_exp], [n_embd, n_ff_exp], [n_ff_exp, n_embd]
  int n_used = 0;                              // experts per token
  float weights_scale = 0.0f;                  // 0: none
  // A shared expert every token takes (qwen35moe), scaled by
  // sigmoid(shared_router . h): rows 0 when absent.
  Matrix shared_gate, shared_up, shared_down, shared_router;
  // gpt-oss: biases of the router and of each expert's three products
  // (rows 0 / empty when absent), llama.cpp's SOFTMAX_WEIGHT gating (the top
  // k by router logit, weights a softmax over those k alone) and its
  // clamped SwiGLU (swiglu_limit > 0: x = min(gate, limit), y = clamp(up,
  // -limit, limit), x * sigmoid(alpha x) * (y + 1), alpha 1.702).
  Matrix router_b;
  std::vector<Matrix> gate_b, up_b, down_b;
  bool softmax_after_topk = false;
  float swiglu_limit = 0.0f;
};
constexpr float kSwigluOaiAlpha = 1.702f;

// The experts a token takes and their weights, in the order the sum uses
// (decreasing probability; ties to the lower index).
struct Routing {
  std::vector<int> expert;
  std::vector<float> weight;
};
Routing route(const float* router_logits, int n_expert, int n_used, float weights_scale,
              bool softmax_after_topk = false);

// y[t] for n rows of h ([n][n_embd]) into out ([n][n_embd], overwritten).
// mm: the matrix product to use (matmul, or matmul_tokens for a server's
// decode group, so each token's bits do not depend on the others').
using MatmulFn = std::function<void(const Matrix& w, const float* x, int n, float* y)>;
void moe_ffn(const MoeWeights& w, const float* h, int n, float* out, const MatmulFn& mm);

}  // namespace tkv
