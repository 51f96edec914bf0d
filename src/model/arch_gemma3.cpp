// Gemma 3 (llama.cpp's gemma3): sliding-window attention on five layers of
// every six (layer il is global when il % 6 == 5, or the period the file
// gives), each with its own rotary base (10000, scale 1) against the global
// layers' (rope.freq_base, the linear scaling); Q and K norms; norms after
// attention and the feed-forward too; GeGLU; embeddings times sqrt(n_embd);
// softmax scale 1/sqrt(head_dim), 1/sqrt(n_embd / n_head) for the 62-layer
// 27B as llama.cpp decides; tied output. The converter stores Gemma's norm
// weights with the +1 already added, so the norms are plain RMSNorms here.
#include <cmath>

#include "model/arch.h"

namespace tkv {
namespace {

Status gemma3_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  c.rope_neox = true;
  c.qk_norm = true;
  c.post_norms = true;
  c.gelu = true;
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.attn_scale = c.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                                 : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.final_softcap = static_cast<float>(a.g.get_float_or(c.arch + ".final_logit_softcapping", 0.0));
  if (!(c.final_softcap >= 0.0f && c.final_softcap < 1e6f))
    return a.error(c.arch + ".final_logit_softcapping = " + std::to_string(c.final_softcap) + " is out of range");
  c.rope_base_swa = static_cast<float>(a.g.get_float_or(c.arch + ".rope.freq_base_swa", 10000.0));
  c.rope_scale_swa = 1.0f;
  if (!(c.rope_base > 1.0f) || !(c.rope_base_swa > 1.0f))
    return a.error("rope.freq_base / rope.freq_base_swa must be > 1");
  auto w = a.optional("attention.sliding_window", 0, 0, 1u << 24);
  if (!w) return w.status();
  auto period = a.optional("attention.sliding_window_pattern", 6, 1, 1u << 16);
  if (!period) return period.status();
  c.window.assign(c.n_layer, 0);
  if (*w > 0)  // no window: every layer global (llama.cpp's swa_type NONE)
    for (int l = 0; l < c.n_layer; ++l) c.window[l] = l % *period < *period - 1 ? *w : 0;
  return Status::Ok();
}

Status gemma3_layer(const ArchLoader& a, int il, LayerWeights& L) {
  if (Status s = load_attention(a, il, L, a.c.n_head * a.c.head_dim); !s.ok()) return s;
  if (Status s = load_ffn(a, il, L, "ffn_norm.weight"); !s.ok()) return s;
  if (Status s = a.load(L.post_attn_norm, il, "post_attention_norm.weight", a.c.n_embd, 1); !s.ok()) return s;
  return a.load(L.post_ffn_norm, il, "post_ffw_norm.weight", a.c.n_embd, 1);
}

}  // namespace

const ArchSpec kArchGemma3{"gemma3", gemma3_hparams, gemma3_layer};

}  // namespace tkv
