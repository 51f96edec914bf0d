// OLMo 2 (llama.cpp's olmo2): no norm before attention or the feed-forward;
// Q and K RMS-normed as whole vectors over all their heads (attn_q_norm of
// n_head * head_dim, attn_k_norm of n_head_kv * head_dim) before NEOX RoPE on
// the full head; the attention and feed-forward outputs normed
// (post_attention_norm, post_ffw_norm) before their residual adds; SwiGLU;
// an untied output. OLMo 3's sliding-window layers (attention.sliding_window)
// are not supported: refused naming the key.
#include <tuple>

#include "model/arch.h"

namespace tkv {
namespace {

Status olmo2_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  c.rope_neox = true;
  c.qk_norm_full = true;
  c.post_norms = true;
  if (a.g.get_uint_or(c.arch + ".attention.sliding_window", 0) > 0)
    return a.error(c.arch + ".attention.sliding_window: OLMo 3's sliding-window layers are not supported");
  if (c.rope_dims != c.head_dim)
    return a.error(c.arch + ".rope.dimension_count " + std::to_string(c.rope_dims) + " is not the head dim " +
                   std::to_string(c.head_dim) + " (OLMo 2 rotates whole heads)");
  return Status::Ok();
}

Status olmo2_layer(const ArchLoader& a, int il, LayerWeights& L) {
  const ModelConfig& c = a.c;
  const int E = c.n_embd, Dq = c.n_head * c.head_dim, Dkv = c.n_head_kv * c.head_dim;
  for (auto [dst, name, cols, rows] : {std::tuple<Matrix*, const char*, int, int>{&L.wq, "attn_q.weight", E, Dq},
                                       {&L.wk, "attn_k.weight", E, Dkv},
                                       {&L.wv, "attn_v.weight", E, Dkv},
                                       {&L.wo, "attn_output.weight", Dq, E},
                                       {&L.q_norm, "attn_q_norm.weight", Dq, 1},
                                       {&L.k_norm, "attn_k_norm.weight", Dkv, 1},
                                       {&L.post_attn_norm, "post_attention_norm.weight", E, 1},
                                       {&L.w_gate, "ffn_gate.weight", E, c.n_ff},
                                       {&L.w_up, "ffn_up.weight", E, c.n_ff},
                                       {&L.w_down, "ffn_down.weight", c.n_ff, E},
                                       {&L.post_ffn_norm, "post_ffw_norm.weight", E, 1}})
    if (Status s = a.load(*dst, il, name, cols, rows); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace

const ArchSpec kArchOlmo2{"olmo2", olmo2_hparams, olmo2_layer};

}  // namespace tkv
