// The llama family: llama (Llama 2/3, Mistral, TinyLlama, SmolLM), qwen2
// (Q/K/V biases), qwen3 (Q and K norms), phi3 (fused QKV and gate/up,
// LongRoPE) and qwen3moe (qwen3 with routed experts); and the attention and
// feed-forward loaders the other architectures share.
#include <tuple>

#include "model/arch.h"

namespace tkv {

Status load_attention(const ArchLoader& a, int il, LayerWeights& L, int q_rows) {
  const ModelConfig& c = a.c;
  const int E = c.n_embd, Dq = c.n_head * c.head_dim, Dkv = c.n_head_kv * c.head_dim;
  const std::string p = "blk." + std::to_string(il) + ".";
  if (Status s = a.load(L.attn_norm, il, "attn_norm.weight", E, 1); !s.ok()) return s;
  if (a.g.tensor(p + "attn_qkv.weight")) {  // Q, K and V rows in one tensor (Phi-3)
    Matrix qkv;
    if (Status s = a.load(qkv, il, "attn_qkv.weight", E, q_rows + 2 * Dkv); !s.ok()) return s;
    L.wq = row_range(qkv, 0, q_rows);
    L.wk = row_range(qkv, q_rows, Dkv);
    L.wv = row_range(qkv, q_rows + Dkv, Dkv);
  } else {
    for (auto [dst, name, rows] : {std::tuple<Matrix*, const char*, int>{&L.wq, "attn_q.weight", q_rows},
                                   {&L.wk, "attn_k.weight", Dkv},
                                   {&L.wv, "attn_v.weight", Dkv}})
      if (Status s = a.load(*dst, il, name, E, rows); !s.ok()) return s;
  }
  if (Status s = a.load(L.wo, il, "attn_output.weight", Dq, E); !s.ok()) return s;
  for (auto [dst, name, cols] : {std::tuple<Matrix*, const char*, int>{&L.bq, "attn_q.bias", q_rows},
                                 {&L.bk, "attn_k.bias", Dkv},
                                 {&L.bv, "attn_v.bias", Dkv}})
    if (Status s = a.load(*dst, il, name, cols, 1, true); !s.ok()) return s;
  if (Status s = a.load(L.q_norm, il, "attn_q_norm.weight", c.head_dim, 1, !c.qk_norm); !s.ok()) return s;
  return a.load(L.k_norm, il, "attn_k_norm.weight", c.head_dim, 1, !c.qk_norm);
}

Status load_ffn(const ArchLoader& a, int il, LayerWeights& L, const char* norm) {
  const ModelConfig& c = a.c;
  const int E = c.n_embd;
  const std::string p = "blk." + std::to_string(il) + ".";
  if (Status s = a.load(L.ffn_norm, il, norm, E, 1); !s.ok()) return s;
  if (c.n_expert > 0) {  // the router and every expert's three matrices (one 3-D tensor each)
    if (Status s = a.load(L.moe.router, il, "ffn_gate_inp.weight", E, c.n_expert); !s.ok()) return s;
    L.moe.n_used = c.n_expert_used;
    L.moe.weights_scale = c.expert_weights_scale;
    for (auto [name, dst, cols, rows] :
         {std::tuple<const char*, std::vector<Matrix>*, int, int>{"ffn_gate_exps.weight", &L.moe.gate, E, c.n_ff_exp},
          {"ffn_up_exps.weight", &L.moe.up, E, c.n_ff_exp},
          {"ffn_down_exps.weight", &L.moe.down, c.n_ff_exp, E}}) {
      auto ex = a.experts(p + name, cols, rows, c.n_expert);
      if (!ex) return ex.status();
      *dst = std::move(*ex);
    }
    if (c.n_ff_shexp > 0) {  // qwen35moe's shared expert and its gate
      for (auto [dst, name, cols, rows] :
           {std::tuple<Matrix*, const char*, int, int>{&L.moe.shared_gate, "ffn_gate_shexp.weight", E, c.n_ff_shexp},
            {&L.moe.shared_up, "ffn_up_shexp.weight", E, c.n_ff_shexp},
            {&L.moe.shared_down, "ffn_down_shexp.weight", c.n_ff_shexp, E},
            {&L.moe.shared_router, "ffn_gate_inp_shexp.weight", E, 1}})
        if (Status s = a.load(*dst, il, name, cols, rows); !s.ok()) return s;
    }
    return Status::Ok();
  }
  if (c.n_ff < 1) return a.error(c.arch + ".feed_forward_length is missing or 0");
  const gguf::Tensor* up = a.g.tensor(p + "ffn_up.weight");
  if (!a.g.tensor(p + "ffn_gate.weight") && up && up->dims.size() == 2 && up->dims[1] == uint64_t(2) * c.n_ff) {
    // Phi-3: gate rows then up rows in ffn_up (llama.cpp's fused SwiGLU: silu of the first half)
    Matrix up2;
    if (Status s = a.load(up2, il, "ffn_up.weight", E, 2 * c.n_ff); !s.ok()) return s;
    L.w_gate = row_range(up2, 0, c.n_ff);
    L.w_up = row_range(up2, c.n_ff, c.n_ff);
  } else {
    if (Status s = a.load(L.w_gate, il, "ffn_gate.weight", E, c.n_ff); !s.ok()) return s;
    if (Status s = a.load(L.w_up, il, "ffn_up.weight", E, c.n_ff); !s.ok()) return s;
  }
  return a.load(L.w_down, il, "ffn_down.weight", c.n_ff, E);
}

namespace {

Status llama_layer(const ArchLoader& a, int il, LayerWeights& L) {
  if (Status s = load_attention(a, il, L, a.c.n_head * a.c.head_dim); !s.ok()) return s;
  return load_ffn(a, il, L, "ffn_norm.weight");
}

Status llama_hparams(const ArchLoader& a) {
  a.c.rope_neox = a.c.arch != "llama";  // llama rotates (2i, 2i+1); the others (i, i + d/2)
  a.c.qk_norm = a.c.arch == "qwen3" || a.c.arch == "qwen3moe";
  a.c.rope_freqs = a.c.arch == "llama";  // llama.cpp reads rope_freqs.weight for llama, not qwen2/qwen3/phi3
  return Status::Ok();
}

// The experts: how many, how many per token, their width (qwen3moe, qwen35moe).
Status moe_hparams(const ArchLoader& a) {
  ModelConfig& c = a.c;
  auto ne = a.need("expert_count");
  if (!ne) return ne.status();
  if (*ne > 4096) return a.error(c.arch + ".expert_count = " + std::to_string(*ne) + " is out of range");
  c.n_expert = *ne;
  auto nu = a.need("expert_used_count");
  if (!nu) return nu.status();
  if (*nu > c.n_expert)
    return a.error(c.arch + ".expert_used_count = " + std::to_string(*nu) + " is more than the " +
                   std::to_string(c.n_expert) + " experts");
  c.n_expert_used = *nu;
  auto nf = a.optional("expert_feed_forward_length", c.n_ff > 0 ? c.n_ff / c.n_expert_used : 0, 1, 1u << 20);
  if (!nf) return nf.status();
  c.n_ff_exp = *nf;
  if (c.n_ff <= 0) c.n_ff = c.n_ff_exp;
  c.expert_weights_scale = static_cast<float>(a.g.get_float_or(c.arch + ".expert_weights_scale", 0.0));
  if (c.expert_weights_scale == 1.0f) c.expert_weights_scale = 0.0f;  // llama.cpp: 0 or 1 means none
  return Status::Ok();
}

Status qwen3moe_hparams(const ArchLoader& a) {
  if (Status s = llama_hparams(a); !s.ok()) return s;
  return moe_hparams(a);
}

}  // namespace

Status arch_moe_hparams(const ArchLoader& a) { return moe_hparams(a); }

const ArchSpec kArchLlama{"llama", llama_hparams, llama_layer};
const ArchSpec kArchQwen2{"qwen2", llama_hparams, llama_layer};
const ArchSpec kArchQwen3{"qwen3", llama_hparams, llama_layer};
const ArchSpec kArchPhi3{"phi3", llama_hparams, llama_layer};
const ArchSpec kArchQwen3Moe{"qwen3moe", qwen3moe_hparams, llama_layer};

}  // namespace tkv
