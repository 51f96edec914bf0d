#include "model/gen_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "model/arch.h"
#include "gguf/quantize_weights.h"
#include "util/fp16.h"
#include "util/rng.h"

namespace tkv {
namespace {

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

Vocab synthetic_vocab(int size) {
  Vocab v;
  auto add = [&](const std::string& s, float score, int type) {
    v.tokens.push_back(s);
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, 6);
  }
  const char* pieces[] = {"\xe2\x96\x81", "e", "t", "a", "o", "\xe2\x96\x81t", "he", "\xe2\x96\x81the", "in", "er"};
  int k = 0;
  while (static_cast<int>(v.tokens.size()) < size) {
    const std::string p = k < 10 ? pieces[k] : "\xe2\x96\x81w" + std::to_string(k);
    add(p, -static_cast<float>(k), 1);
    ++k;
  }
  return v;
}

}  // namespace

Status generate_model(const GenModelOptions& o, const gguf::File* vocab_file, const std::string& out_path) {
  if (!find_arch(o.arch))  // the runtime's table: every architecture it loads is one gen-model writes
    return Status::Error("gen-model: --arch must be one of " + arch_names() + ", not '" + o.arch + "'");
  const bool gptoss = o.arch == "gpt-oss";
  const bool moe = o.arch == "qwen3moe" || o.arch == "qwen35moe" || gptoss;
  const bool gemma = o.arch == "gemma3", q35 = o.arch == "qwen35" || o.arch == "qwen35moe";
  if (moe && (o.experts < 1 || o.experts_used < 1 || o.experts_used > o.experts))
    return Status::Error("gen-model: " + o.arch + " needs 1 <= --experts-used <= --experts");
  if (q35 && (o.ssm_groups < 1 || o.ssm_v_heads % o.ssm_groups || o.ssm_state < 2 || o.ssm_conv < 2 ||
              o.full_attn_interval < 1))
    return Status::Error("gen-model: qwen35 needs --ssm-v-heads a multiple of --ssm-groups, --ssm-state >= 2, "
                         "--ssm-conv >= 2");
  const int rope_dims = o.rope_dims > 0 ? o.rope_dims : q35 ? std::max(2, o.head_dim / 4) / 2 * 2 : o.head_dim;
  if (rope_dims > o.head_dim || rope_dims % 2) return Status::Error("gen-model: --rope-dims must be even and <= head dim");
  const float rope_base = o.rope_base > 0 ? o.rope_base : gemma ? 1e6f : q35 ? 1e7f : 10000.0f;
  if (o.rope_orig_ctx && o.arch != "phi3") return Status::Error("gen-model: --rope-orig-ctx is for phi3");
  if (o.llama3_rope_ctx && o.arch != "llama") return Status::Error("gen-model: --llama3-rope is for llama");
  if (o.yarn_factor != 0.0f && (!(o.yarn_factor >= 1.0f && o.yarn_factor <= 1e4f) || o.yarn_orig_ctx < 1 || o.rope_orig_ctx))
    return Status::Error("gen-model: --yarn-factor must be in 1..10000, with --yarn-orig-ctx > 0 and without --rope-orig-ctx");
  const gguf::TensorType* tt = gguf::tensor_type(o.type);
  const bool block_type = o.type == "Q8_0" || o.type == "Q4_0" || o.type == "Q4_1" || o.type == "Q5_0" ||
                          o.type == "Q5_1" || o.type == "Q4_K" || o.type == "Q5_K" || o.type == "Q6_K" ||
                          o.type == "MXFP4";
  if (!tt || !(o.type == "F32" || o.type == "F16" || o.type == "BF16" || block_type))
    return Status::Error("gen-model: --type must be F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K or MXFP4, not '" +
                         o.type + "'");
  if (o.layers < 1 || o.dim < 1 || o.heads < 1 || o.kv_heads < 1 || o.heads % o.kv_heads || o.head_dim < 8 ||
      o.head_dim % 2 || o.ffn < 1)
    return Status::Error("gen-model: bad shape (heads must be a multiple of kv-heads, head dim even and >= 8)");
  const bool quant = tt->block > 1;
  const int blk = static_cast<int>(tt->block);
  const int Dss = o.ssm_v_heads * o.ssm_state;  // qwen35: value dims of a DeltaNet layer
  const int shared_ffn = o.shared_ffn > 0 ? o.shared_ffn : o.ffn;
  if (quant && (o.dim % blk || o.ffn % blk || (o.heads * o.head_dim) % blk || (q35 && Dss % blk) ||
                (o.arch == "qwen35moe" && shared_ffn % blk)))
    return Status::Error("gen-model: " + o.type + " needs dim, ffn, heads*head_dim (and the DeltaNet value dims) to be "
                         "multiples of " + std::to_string(blk));
  if (o.harmony_vocab && (!gptoss || !vocab_file))
    return Status::Error("gen-model: --harmony-vocab is for --arch gpt-oss with --vocab-from a byte-level BPE (gpt2) "
                         "vocabulary");
  Vocab vocab;
  gguf::Writer w;
  std::string tok_model = "llama", pre;
  std::vector<std::string> merges;
  uint32_t bos = 1, eos = 2, unk = 0;
  bool add_bos = true;
  std::string chat_template;
  if (vocab_file) {
    const gguf::Value* t = vocab_file->find("tokenizer.ggml.tokens");
    if (!t || t->elem != gguf::Type::kString) return Status::Error(vocab_file->path() + ": no tokenizer.ggml.tokens");
    for (auto s : t->strings) vocab.tokens.emplace_back(s);
    const gguf::Value* sc = vocab_file->find("tokenizer.ggml.scores");
    const gguf::Value* ty = vocab_file->find("tokenizer.ggml.token_type");
    for (uint64_t i = 0; i < t->count; ++i) {
      vocab.scores.push_back(sc && sc->raw && sc->count == t->count ? static_cast<float>(sc->num(i)) : 0.0f);
      vocab.types.push_back(ty && ty->raw && ty->count == t->count ? static_cast<int32_t>(ty->inum(i)) : 1);
    }
    tok_model = vocab_file->get_string_or("tokenizer.ggml.model", "llama");
    // A byte-level BPE vocabulary needs its merges and pre-tokenizer name too
    // (a SentencePiece one's files stay as they were: no pre-tokenizer key).
    if (tok_model == "gpt2") {
      if (const gguf::Value* m = vocab_file->find("tokenizer.ggml.merges"); m && m->elem == gguf::Type::kString)
        for (auto s : m->strings) merges.emplace_back(s);
      pre = vocab_file->get_string_or("tokenizer.ggml.pre", "");
    }
    for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &bos}, std::pair{"tokenizer.ggml.eos_token_id", &eos},
                           std::pair{"tokenizer.ggml.unknown_token_id", &unk}})
      if (vocab_file->find(key))
        if (auto u = vocab_file->get_uint(key); u) *id = static_cast<uint32_t>(*u);
    if (const gguf::Value* b = vocab_file->find("tokenizer.ggml.add_bos_token")) add_bos = b->u != 0;
  } else {
    vocab = synthetic_vocab(std::max(o.vocab, 300));
  }
  if (o.harmony_vocab) {
    if (tok_model != "gpt2" || merges.empty())
      return Status::Error("gen-model: --harmony-vocab needs --vocab-from a byte-level BPE (gpt2) vocabulary with "
                           "merges; " + vocab_file->path() + " has tokenizer.ggml.model '" + tok_model + "'");
    // gpt-oss's o200k_harmony conventions (its special tokens, the gpt-4o
    // pre-tokenizer, BOS <|startoftext|>, EOS <|return|>, no automatic BOS)
    // on a smaller byte-level vocabulary: the specials are appended as control
    // tokens unless the vocabulary has them already.
    auto find_or_add = [&](const std::string& text) {
      for (size_t i = 0; i < vocab.tokens.size(); ++i)
        if (vocab.tokens[i] == text) {
          vocab.types[i] = 3;
          return static_cast<uint32_t>(i);
        }
      vocab.tokens.push_back(text);
      vocab.scores.push_back(0.0f);
      vocab.types.push_back(3);  // control
      return static_cast<uint32_t>(vocab.tokens.size() - 1);
    };
    bos = find_or_add("<|startoftext|>");
    find_or_add("<|endoftext|>");
    eos = find_or_add("<|return|>");
    for (const char* t : {"<|constrain|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>",
                          "<|endofprompt|>"})
      find_or_add(t);
    unk = bos;
    add_bos = false;
    pre = "gpt-4o";
    // Our own short template with harmony's markers (a system message becomes
    // the developer's instructions, earlier assistant turns their final
    // channel), enough for an engine to recognise the format.
    chat_template =
        "{%- for m in messages -%}{%- if m.role == 'user' -%}<|start|>user<|message|>{{ m.content }}<|end|>"
        "{%- elif m.role == 'assistant' -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
        "{%- elif loop.first -%}<|start|>developer<|message|># Instructions\n\n{{ m.content }}\n\n<|end|>"
        "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";
  }
  const int V = static_cast<int>(vocab.tokens.size());
  const std::string a = o.arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", "turbokv random " + a);
  w.add_u32("general.alignment", 32);
  w.add_u32(a + ".context_length", o.ctx);
  w.add_u32(a + ".embedding_length", o.dim);
  w.add_u32(a + ".block_count", o.layers);
  w.add_u32(a + ".feed_forward_length", o.ffn);
  w.add_u32(a + ".attention.head_count", o.heads);
  w.add_u32(a + ".attention.head_count_kv", o.kv_heads);
  w.add_u32(a + ".attention.key_length", o.head_dim);
  w.add_u32(a + ".attention.value_length", o.head_dim);
  w.add_u32(a + ".rope.dimension_count", rope_dims);
  w.add_f32(a + ".rope.freq_base", rope_base);
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", gemma || q35 ? 1e-6f : 1e-5f);
  if (moe) {
    w.add_u32(a + ".expert_count", o.experts);
    w.add_u32(a + ".expert_used_count", o.experts_used);
    w.add_u32(a + ".expert_feed_forward_length", o.ffn);
    if (o.arch == "qwen35moe") w.add_u32(a + ".expert_shared_feed_forward_length", shared_ffn);
  }
  if (gptoss) w.add_u32(a + ".attention.sliding_window", o.window);  // on the even layers
  if (gemma) {  // llama.cpp's gemma3 reads the window; the period only when it is not 6
    w.add_u32(a + ".attention.sliding_window", o.window);
    if (o.swa_period != 6) w.add_u32(a + ".attention.sliding_window_pattern", o.swa_period);
  }
  if (q35) {  // as Qwen3_5's converter writes them
    w.add_u32(a + ".ssm.conv_kernel", o.ssm_conv);
    w.add_u32(a + ".ssm.state_size", o.ssm_state);
    w.add_u32(a + ".ssm.group_count", o.ssm_groups);
    w.add_u32(a + ".ssm.time_step_rank", o.ssm_v_heads);
    w.add_u32(a + ".ssm.inner_size", Dss);
    w.add_u32(a + ".full_attention_interval", o.full_attn_interval);
    const int pairs = rope_dims / 2;  // IMROPE sections over the rotated pairs (text: t = h = w)
    w.add_i32_array(a + ".rope.dimension_sections", {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0});
  }
  if (o.rope_orig_ctx) {  // Phi-3 LongRoPE, as its converter writes it
    w.add_u32(a + ".rope.scaling.original_context_length", o.rope_orig_ctx);
    const double scale = double(o.ctx) / o.rope_orig_ctx;
    w.add_f32(a + ".rope.scaling.attn_factor",
              scale <= 1.0 ? 1.0f : static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(double(o.rope_orig_ctx)))));
  }
  if (o.arch == "granite") {  // its four scales, as its converter writes them
    w.add_f32(a + ".embedding_scale", o.embedding_scale);
    w.add_f32(a + ".residual_scale", o.residual_scale);
    w.add_f32(a + ".attention.scale", o.attention_scale);
    w.add_f32(a + ".logit_scale", o.logit_scale);
  }
  if (o.yarn_factor != 0.0f) {  // YaRN, as llama.cpp's converters write it for Qwen and Llama checkpoints
    w.add_string(a + ".rope.scaling.type", "yarn");
    w.add_f32(a + ".rope.scaling.factor", o.yarn_factor);
    w.add_u32(a + ".rope.scaling.original_context_length", o.yarn_orig_ctx);
  }
  w.add_string("tokenizer.ggml.model", tok_model);
  w.add_string_array("tokenizer.ggml.tokens", vocab.tokens);
  w.add_f32_array("tokenizer.ggml.scores", vocab.scores);
  w.add_i32_array("tokenizer.ggml.token_type", vocab.types);
  if (!merges.empty()) w.add_string_array("tokenizer.ggml.merges", merges);
  if (!pre.empty()) w.add_string("tokenizer.ggml.pre", pre);
  w.add_u32("tokenizer.ggml.bos_token_id", bos);
  w.add_u32("tokenizer.ggml.eos_token_id", eos);
  w.add_u32("tokenizer.ggml.unknown_token_id", unk);
  w.add_bool("tokenizer.ggml.add_bos_token", add_bos);
  if (!chat_template.empty()) w.add_string("tokenizer.chat_template", chat_template);

  Rng rng(o.seed);
  // Large models draw from a pool of Gaussians at random offsets (a 1 GB model
  // in seconds); small ones use fresh draws.
  std::vector<float> pool(1 << 20);
  for (auto& v : pool) v = static_cast<float>(rng.gaussian());
  // n_mat > 1: a 3-D tensor of n_mat matrices (a mixture's experts).
  auto add = [&](const std::string& name, int cols, int rows, bool matrix, float std_dev, float mean,
                 int n_mat = 1) -> Status {
    std::vector<float> x(size_t(cols) * rows * n_mat);
    if (x.size() <= pool.size()) {
      for (auto& v : x) v = mean + static_cast<float>(rng.gaussian()) * std_dev;
    } else {
      for (size_t r = 0; r < size_t(rows) * n_mat; ++r) {
        size_t off = rng.below(static_cast<uint32_t>(pool.size()));
        for (int c = 0; c < cols; ++c) x[r * cols + c] = mean + pool[(off + c) % pool.size()] * std_dev;
      }
    }
    std::vector<uint64_t> dims = rows == 1 ? std::vector<uint64_t>{uint64_t(cols)}
                                           : std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)};
    if (n_mat > 1) dims.push_back(uint64_t(n_mat));
    if (!matrix || o.type == "F32") return w.add_tensor(name, dims, 0, x.data(), x.size() * 4);
    std::vector<uint8_t> b(size_t(cols) / tt->block * tt->block_bytes * rows * n_mat);
    if (o.type == "F16" || o.type == "BF16") {
      for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t h = o.type == "F16" ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        std::memcpy(&b[2 * i], &h, 2);
      }
    } else {
      const size_t rb = size_t(cols) / tt->block * tt->block_bytes;
      for (size_t r = 0; r < size_t(rows) * n_mat; ++r) quantize_weight_row(o.type, &x[r * cols], cols, &b[r * rb]);
    }
    return w.add_tensor(name, dims, tt->id, b.data(), b.size());
  };
  const int E = o.dim, Dq = o.heads * o.head_dim, Dkv = o.kv_heads * o.head_dim;
  const float s = o.weight_scale;
  Status st;
#define TKV_ADD(...) if (!(st = add(__VA_ARGS__)).ok()) return st
  // Gemma scales its embeddings by sqrt(dim): smaller rows keep the same size.
  TKV_ADD("token_embd.weight", E, V, true, gemma ? 1.0f / std::sqrt(float(E)) : 1.0f, 0.0f);
  TKV_ADD("output_norm.weight", E, 1, false, 0.1f, 1.0f);
  if (!gemma) TKV_ADD("output.weight", E, V, true, s / std::sqrt(float(E)), 0.0f);  // gemma3: tied
  const bool phi3 = o.arch == "phi3";
  if (o.rope_orig_ctx) {  // one factor per rotated pair: short ones near 1, long ones growing to ~8
    std::vector<float> fl(o.head_dim / 2), fs(o.head_dim / 2);
    for (int i = 0; i < o.head_dim / 2; ++i) {
      fs[i] = 1.0f + 0.05f * static_cast<float>(rng.uniform());
      fl[i] = 1.0f + 7.0f * float(i) / float(o.head_dim / 2) + 0.5f * static_cast<float>(rng.uniform());
    }
    if (!(st = w.add_tensor("rope_factors_long.weight", {uint64_t(fl.size())}, 0, fl.data(), 4 * fl.size())).ok()) return st;
    if (!(st = w.add_tensor("rope_factors_short.weight", {uint64_t(fs.size())}, 0, fs.data(), 4 * fs.size())).ok()) return st;
  }
  const bool olmo2 = o.arch == "olmo2";  // no pre-norms; Q/K norms over all heads; post norms
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (!olmo2) TKV_ADD(p + "attn_norm.weight", E, 1, false, 0.1f, 1.0f);
    if (q35 && (l + 1) % o.full_attn_interval != 0) {  // a Gated DeltaNet layer
      const int Hv = o.ssm_v_heads, ch = 2 * o.ssm_groups * o.ssm_state + Dss;
      TKV_ADD(p + "attn_qkv.weight", E, ch, true, s / std::sqrt(float(E)), 0.0f);
      TKV_ADD(p + "attn_gate.weight", E, Dss, true, s / std::sqrt(float(E)), 0.0f);
      TKV_ADD(p + "ssm_conv1d.weight", o.ssm_conv, ch, false, 0.5f, 0.0f);
      TKV_ADD(p + "ssm_dt.bias", Hv, 1, false, 0.5f, 0.0f);
      std::vector<float> A(Hv);  // -exp(A_log), as the converter stores it
      for (auto& x : A) x = -std::exp(static_cast<float>(rng.gaussian()) * 0.5f);
      if (!(st = w.add_tensor(p + "ssm_a", {uint64_t(Hv)}, 0, A.data(), 4 * A.size())).ok()) return st;
      TKV_ADD(p + "ssm_beta.weight", E, Hv, true, s / std::sqrt(float(E)), 0.0f);
      TKV_ADD(p + "ssm_alpha.weight", E, Hv, true, s / std::sqrt(float(E)), 0.0f);
      TKV_ADD(p + "ssm_norm.weight", o.ssm_state, 1, false, 0.1f, 1.0f);
      TKV_ADD(p + "ssm_out.weight", Dss, E, true, s / std::sqrt(float(Dss)), 0.0f);
    } else if (phi3) {  // Q, K, V rows in one tensor
      TKV_ADD(p + "attn_qkv.weight", E, Dq + 2 * Dkv, true, s / std::sqrt(float(E)), 0.0f);
    } else {
      TKV_ADD(p + "attn_q.weight", E, q35 ? 2 * Dq : Dq, true, s / std::sqrt(float(E)), 0.0f);  // qwen35: query and gate per head
      TKV_ADD(p + "attn_k.weight", E, Dkv, true, s / std::sqrt(float(E)), 0.0f);
      TKV_ADD(p + "attn_v.weight", E, Dkv, true, s / std::sqrt(float(E)), 0.0f);
    }
    const bool attn_layer = !q35 || (l + 1) % o.full_attn_interval == 0;
    if (attn_layer) TKV_ADD(p + "attn_output.weight", Dq, E, true, s / std::sqrt(float(Dq)), 0.0f);
    if (gptoss) {  // output bias and a sink per head
      TKV_ADD(p + "attn_output.bias", E, 1, false, 0.1f, 0.0f);
      TKV_ADD(p + "attn_sinks.weight", o.heads, 1, false, 1.0f, 0.0f);
    }
    if (o.arch == "qwen2" || gptoss) {  // Qwen2-style biases, with a large constant part on K
      TKV_ADD(p + "attn_q.bias", Dq, 1, false, 0.1f, 0.0f);
      TKV_ADD(p + "attn_k.bias", Dkv, 1, false, 2.0f, 0.0f);
      TKV_ADD(p + "attn_v.bias", Dkv, 1, false, 0.1f, 0.0f);
    }
    if (attn_layer && (o.arch == "qwen3" || (moe && !gptoss) || gemma || q35)) {
      TKV_ADD(p + "attn_q_norm.weight", o.head_dim, 1, false, 0.1f, 1.0f);
      TKV_ADD(p + "attn_k_norm.weight", o.head_dim, 1, false, 0.1f, 1.0f);
    }
    if (olmo2) {
      TKV_ADD(p + "attn_q_norm.weight", Dq, 1, false, 0.1f, 1.0f);
      TKV_ADD(p + "attn_k_norm.weight", Dkv, 1, false, 0.1f, 1.0f);
    }
    if (gemma || olmo2) {
      TKV_ADD(p + "post_attention_norm.weight", E, 1, false, 0.1f, 1.0f);
      TKV_ADD(p + "post_ffw_norm.weight", E, 1, false, 0.1f, 1.0f);
    }
    if (!olmo2) TKV_ADD(p + (q35 || gptoss ? "post_attention_norm.weight" : "ffn_norm.weight"), E, 1, false, 0.1f, 1.0f);
    if (moe) {  // the router (F32, as llama.cpp's converter keeps it), then each expert's matrices
      if (!(st = add(p + "ffn_gate_inp.weight", E, o.experts, false, 1.0f / std::sqrt(float(E)), 0.0f)).ok()) return st;
      TKV_ADD(p + "ffn_gate_exps.weight", E, o.ffn, true, s / std::sqrt(float(E)), 0.0f, o.experts);
      TKV_ADD(p + "ffn_up_exps.weight", E, o.ffn, true, s / std::sqrt(float(E)), 0.0f, o.experts);
      TKV_ADD(p + "ffn_down_exps.weight", o.ffn, E, true, s / std::sqrt(float(o.ffn)), 0.0f, o.experts);
      if (gptoss) {  // biases of the router and of each expert's products
        TKV_ADD(p + "ffn_gate_inp.bias", o.experts, 1, false, 0.5f, 0.0f);
        TKV_ADD(p + "ffn_gate_exps.bias", o.ffn, o.experts, false, 0.5f, 0.0f);
        TKV_ADD(p + "ffn_up_exps.bias", o.ffn, o.experts, false, 0.5f, 0.0f);
        TKV_ADD(p + "ffn_down_exps.bias", E, o.experts, false, 0.1f, 0.0f);
      }
      if (o.arch == "qwen35moe") {  // the shared expert and its gate
        if (!(st = add(p + "ffn_gate_inp_shexp.weight", E, 1, false, 1.0f / std::sqrt(float(E)), 0.0f)).ok()) return st;
        TKV_ADD(p + "ffn_gate_shexp.weight", E, shared_ffn, true, s / std::sqrt(float(E)), 0.0f);
        TKV_ADD(p + "ffn_up_shexp.weight", E, shared_ffn, true, s / std::sqrt(float(E)), 0.0f);
        TKV_ADD(p + "ffn_down_shexp.weight", shared_ffn, E, true, s / std::sqrt(float(shared_ffn)), 0.0f);
      }
      continue;
    }
    if (phi3) {  // gate rows, then up rows
      TKV_ADD(p + "ffn_up.weight", E, 2 * o.ffn, true, s / std::sqrt(float(E)), 0.0f);
    } else {
      TKV_ADD(p + "ffn_gate.weight", E, o.ffn, true, s / std::sqrt(float(E)), 0.0f);
      TKV_ADD(p + "ffn_up.weight", E, o.ffn, true, s / std::sqrt(float(E)), 0.0f);
    }
    TKV_ADD(p + "ffn_down.weight", o.ffn, E, true, s / std::sqrt(float(o.ffn)), 0.0f);
  }
  if (o.llama3_rope_ctx) {  // after the layers, as the converter writes it: Llama 3 scaling per rotated pair, by wavelength (llama.cpp's converter)
    const double factor = 8.0, low = 1.0, high = 4.0, ctx0 = o.llama3_rope_ctx;
    std::vector<float> ff(rope_dims / 2);
    for (int i = 0; i < rope_dims / 2; ++i) {
      const double wavelen = 2.0 * M_PI / std::pow(double(rope_base), -2.0 * i / rope_dims);
      if (wavelen < ctx0 / high) ff[i] = 1.0f;
      else if (wavelen > ctx0 / low) ff[i] = static_cast<float>(factor);
      else {
        const double smooth = (ctx0 / wavelen - low) / (high - low);
        ff[i] = static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth));
      }
    }
    if (!(st = w.add_tensor("rope_freqs.weight", {uint64_t(ff.size())}, 0, ff.data(), 4 * ff.size())).ok()) return st;
  }
#undef TKV_ADD
  return w.write(out_path);
}

}  // namespace tkv
