// Granite (llama.cpp's granite, dense): the llama stack with four scales from
// the file: embeddings times `embedding_scale`, each layer's attention and
// feed-forward outputs times `residual_scale` before their residual add, the
// softmax scale `attention.scale` instead of 1/sqrt(head_dim), and the
// logits divided by `logit_scale` (required, as llama.cpp requires it); a
// scale of 0 or absent is none. `rope.scaling.finetuned` false: no RoPE.
// Llama 3's rope_freqs.weight is read (llama.cpp's granite loader reads it).
// The optional attention-output and feed-forward biases llama.cpp allows
// are not read: a file with them is refused naming them (tensor accounting).
#include <cmath>
#include <tuple>

#include "model/arch.h"

namespace tkv {
namespace {

Status granite_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  c.rope_neox = false;
  c.rope_freqs = true;
  const std::string k = c.arch + ".";
  if (!a.g.find(k + "logit_scale")) return a.error(k + "logit_scale is missing (Granite's logits are divided by it)");
  for (auto [name, dst, required_positive] :
       {std::tuple<const char*, float*, bool>{"logit_scale", &c.logit_scale, true},
        {"residual_scale", &c.residual_scale, false},
        {"embedding_scale", &c.embd_scale, false},
        {"attention.scale", &c.attn_scale, false}}) {
    auto v = a.g.get_float(k + name);
    const double x = v ? *v : 0.0;
    if (a.g.find(k + name) && !v) return v.status();
    if (!std::isfinite(x) || x < 0.0 || x > 1e6 || (required_positive && x == 0.0))
      return a.error(k + name + " = " + std::to_string(x) + " is out of range (" +
                     (required_positive ? "> 0" : ">= 0, 0 for none") + ", finite)");
    *dst = static_cast<float>(x);
  }
  if (const gguf::Value* ft = a.g.find(k + "rope.scaling.finetuned")) {
    if (ft->type != gguf::Type::kBool) return a.error(k + "rope.scaling.finetuned is not a bool");
    if (ft->u == 0) c.no_rope.assign(c.n_layer, 1);  // llama.cpp: rope_finetuned false, no rotation
  }
  return Status::Ok();
}

Status granite_layer(const ArchLoader& a, int il, LayerWeights& L) {
  if (Status s = load_attention(a, il, L, a.c.n_head * a.c.head_dim); !s.ok()) return s;
  return load_ffn(a, il, L, "ffn_norm.weight");
}

}  // namespace

const ArchSpec kArchGranite{"granite", granite_hparams, granite_layer};

}  // namespace tkv
