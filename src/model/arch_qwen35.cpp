// Qwen3.5 (llama.cpp's qwen35 and qwen35moe): a hybrid stack. Layer il is a
// gated full-attention layer when (il + 1) % full_attention_interval == 0
// (or as the attention.recurrent_layers array says), else a Gated DeltaNet
// layer (model/delta_net.h) with no KV cache. Attention layers: attn_q gives
// each head's query and an output gate (sigmoid), Q and K norms, rotary on
// the first rope.dimension_count dims (llama.cpp's IMROPE, which for text,
// every section at the same position, is NEOX rotation), base 1e7 in the
// released models. post_attention_norm is the feed-forward's norm. Norm
// weights carry the converter's +1 except ssm_norm. The MTP blocks that
// block_count includes (nextn_predict_layers) are not run.
#include <tuple>

#include "model/arch.h"

namespace tkv {
namespace {

Status qwen35_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  c.rope_neox = true;
  c.qk_norm = true;
  c.attn_gate = true;
  auto nextn = a.optional("nextn_predict_layers", 0, 0, uint64_t(c.n_layer - 1));
  if (!nextn) return nextn.status();
  c.n_layer -= *nextn;
  int* dst[] = {&c.ssm_conv, &c.ssm_k_dim, &c.ssm_k_heads, &c.ssm_v_heads};
  const char* keys[] = {"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank"};
  for (int i = 0; i < 4; ++i) {
    auto v = a.need(keys[i]);
    if (!v) return v.status();
    if (*v > 65536) return a.error(c.arch + "." + keys[i] + " = " + std::to_string(*v) + " is out of range");
    *dst[i] = *v;
  }
  auto inner = a.need("ssm.inner_size");
  if (!inner) return inner.status();
  if (*inner % c.ssm_v_heads != 0 || c.ssm_v_heads % c.ssm_k_heads != 0 || c.ssm_conv < 2)
    return a.error(c.arch + ": ssm.inner_size " + std::to_string(*inner) + ", time_step_rank " +
                   std::to_string(c.ssm_v_heads) + ", group_count " + std::to_string(c.ssm_k_heads) + ", conv_kernel " +
                   std::to_string(c.ssm_conv) + " do not fit (value heads a multiple of key heads, conv >= 2)");
  c.ssm_v_dim = *inner / c.ssm_v_heads;
  if (size_t(2) * c.ssm_k_heads * c.ssm_k_dim + size_t(*inner) > (size_t(1) << 24))
    return a.error(c.arch + ": the Gated DeltaNet projection is too wide");
  // Which layers are recurrent.
  std::vector<bool> recurrent(c.n_layer);
  if (const gguf::Value* arr = a.g.find(c.arch + ".attention.recurrent_layers")) {
    if (arr->type != gguf::Type::kArray || arr->count < uint64_t(c.n_layer) || !arr->strings.empty() || !arr->items.empty())
      return a.error(c.arch + ".attention.recurrent_layers is not an array of one flag per layer");
    for (int l = 0; l < c.n_layer; ++l) recurrent[l] = arr->inum(l) != 0;
  } else {
    auto interval = a.optional("full_attention_interval", 4, 1, 1u << 16);
    if (!interval) return interval.status();
    for (int l = 0; l < c.n_layer; ++l) recurrent[l] = (l + 1) % *interval != 0;
  }
  int kv = 0;
  for (int l = 0; l < c.n_layer; ++l) c.kv_layer.push_back(recurrent[l] ? -1 : kv++);
  if (kv == 0) return a.error(c.arch + ": every layer is recurrent; at least one attention layer is needed");
  if (c.arch == "qwen35moe") {
    if (Status s = arch_moe_hparams(a); !s.ok()) return s;
    // The shared expert's width: the key, else its tensor's shape.
    uint64_t sh = a.g.get_uint_or(c.arch + ".expert_shared_feed_forward_length", 0);
    if (sh == 0)
      if (const gguf::Tensor* t = a.g.tensor("blk.0.ffn_gate_shexp.weight"); t && t->dims.size() == 2) sh = t->dims[1];
    if (sh > (1u << 20)) return a.error(c.arch + ".expert_shared_feed_forward_length is out of range");
    c.n_ff_shexp = static_cast<int>(sh);
  }
  return Status::Ok();
}

Status delta_tensors(const ArchLoader& a, int il, LayerWeights& L) {
  const ModelConfig& c = a.c;
  const int E = c.n_embd, Dv = c.ssm_v_heads * c.ssm_v_dim;
  const int channels = 2 * c.ssm_k_heads * c.ssm_k_dim + Dv;
  for (auto [dst, name, cols, rows] : {std::tuple<Matrix*, const char*, int, int>{&L.attn_norm, "attn_norm.weight", E, 1},
                                       {&L.wqkv, "attn_qkv.weight", E, channels},
                                       {&L.wz, "attn_gate.weight", E, Dv},
                                       {&L.conv, "ssm_conv1d.weight", c.ssm_conv, channels},
                                       {&L.dt_bias, "ssm_dt.bias", c.ssm_v_heads, 1},
                                       {&L.ssm_a, "ssm_a", c.ssm_v_heads, 1},
                                       {&L.w_beta, "ssm_beta.weight", E, c.ssm_v_heads},
                                       {&L.w_alpha, "ssm_alpha.weight", E, c.ssm_v_heads},
                                       {&L.ssm_norm, "ssm_norm.weight", c.ssm_v_dim, 1},
                                       {&L.wo, "ssm_out.weight", Dv, E}})
    if (Status s = a.load(*dst, il, name, cols, rows); !s.ok()) return s;
  // The small tensors as floats once, not per forward pass.
  L.delta = delta_net_weights(L.conv, L.dt_bias, L.ssm_a, L.ssm_norm, c.delta_shape());
  return Status::Ok();
}

Status qwen35_layer(const ArchLoader& a, int il, LayerWeights& L) {
  Status s = a.c.kv_layer[il] < 0 ? delta_tensors(a, il, L)
                                  : load_attention(a, il, L, 2 * a.c.n_head * a.c.head_dim);  // query and gate per head
  if (!s.ok()) return s;
  return load_ffn(a, il, L, "post_attention_norm.weight");
}

}  // namespace

const ArchSpec kArchQwen35{"qwen35", qwen35_hparams, qwen35_layer};
const ArchSpec kArchQwen35Moe{"qwen35moe", qwen35_hparams, qwen35_layer};

}  // namespace tkv
