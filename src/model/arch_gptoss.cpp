// gpt-oss (llama.cpp's openai-moe, GGUF architecture "gpt-oss"): attention
// with Q/K/V and output biases and a learned sink per query head (a logit in
// each head's softmax denominator, AttentionArgs::sinks); sliding-window
// attention (attention.sliding_window) on the even layers, full on the odd
// ones, both with the same RoPE (NEOX, YaRN from the file); the feed-forward
// norm is post_attention_norm; routed experts with biases on the router and
// each expert's three products, llama.cpp's SOFTMAX_WEIGHT gating (the top k
// by router logit, weights a softmax over those k) and its clamped SwiGLU
// (alpha 1.702, limit 7, both fixed in llama.cpp, not keys). Experts are
// MXFP4 in the released files. The harmony chat template is the server's
// (text/chat_template.h).
#include <cmath>
#include <tuple>

#include "model/arch.h"

namespace tkv {
namespace {

constexpr float kSwigluLimit = 7.0f;

Status gptoss_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  c.rope_neox = true;
  if (Status s = arch_moe_hparams(a); !s.ok()) return s;
  auto w = a.need("attention.sliding_window");
  if (!w) return w.status();
  c.window.assign(c.n_layer, 0);
  for (int l = 0; l < c.n_layer; ++l) c.window[l] = l % 2 == 0 ? *w : 0;  // llama.cpp's swa pattern 2
  c.rope_base_swa = c.rope_base;  // one rotation for both kinds of layer
  c.rope_scale_swa = c.rope_scale;
  return Status::Ok();
}

Status gptoss_layer(const ArchLoader& a, int il, LayerWeights& L) {
  const ModelConfig& c = a.c;
  const int E = c.n_embd, F = c.n_ff_exp, X = c.n_expert;
  if (Status s = load_attention(a, il, L, c.n_head * c.head_dim); !s.ok()) return s;
  if (Status s = a.load(L.bo, il, "attn_output.bias", E, 1); !s.ok()) return s;
  Matrix sinks;
  if (Status s = a.load(sinks, il, "attn_sinks.weight", c.n_head, 1); !s.ok()) return s;
  L.sinks.resize(c.n_head);
  dequantize_row(sinks, 0, L.sinks.data());
  for (int h = 0; h < c.n_head; ++h)
    if (!std::isfinite(L.sinks[h]))
      return a.error("blk." + std::to_string(il) + ".attn_sinks.weight[" + std::to_string(h) + "] is " +
                     std::to_string(L.sinks[h]) + " (sinks must be finite)");
  if (Status s = load_ffn(a, il, L, "post_attention_norm.weight"); !s.ok()) return s;
  if (Status s = a.load(L.moe.router_b, il, "ffn_gate_inp.bias", X, 1); !s.ok()) return s;
  for (auto [name, dst, cols] : {std::tuple<const char*, std::vector<Matrix>*, int>{"ffn_gate_exps.bias", &L.moe.gate_b, F},
                                 {"ffn_up_exps.bias", &L.moe.up_b, F},
                                 {"ffn_down_exps.bias", &L.moe.down_b, E}}) {
    Matrix b;  // [cols, n_expert]: row e is expert e's bias
    if (Status s = a.load(b, il, name, cols, X); !s.ok()) return s;
    dst->clear();
    for (int e = 0; e < X; ++e) dst->push_back(row_range(b, e, 1));
  }
  L.moe.softmax_after_topk = true;
  L.moe.swiglu_limit = kSwigluLimit;
  return Status::Ok();
}

}  // namespace

const ArchSpec kArchGptOss{"gpt-oss", gptoss_hparams, gptoss_layer};

}  // namespace tkv
