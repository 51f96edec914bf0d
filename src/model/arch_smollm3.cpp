// SmolLM3 (llama.cpp's smollm3): the llama stack (adjacent-pair rotation,
// optional output, Q/K/V biases where present) except that every fourth
// layer has no RoPE at all (NoPE: layer il rotates unless (il + 1) % 4 == 0,
// llama.cpp's n_no_rope_layer_step, fixed at 4 and not a key of the file).
#include "model/arch.h"

namespace tkv {
namespace {

constexpr int kNoRopeStep = 4;

Status smollm3_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  c.rope_neox = false;
  c.no_rope.assign(c.n_layer, 0);
  for (int l = 0; l < c.n_layer; ++l) c.no_rope[l] = (l + 1) % kNoRopeStep == 0;
  return Status::Ok();
}

Status smollm3_layer(const ArchLoader& a, int il, LayerWeights& L) {
  if (Status s = load_attention(a, il, L, a.c.n_head * a.c.head_dim); !s.ok()) return s;
  return load_ffn(a, il, L, "ffn_norm.weight");
}

}  // namespace

const ArchSpec kArchSmolLM3{"smollm3", smollm3_hparams, smollm3_layer};

}  // namespace tkv
