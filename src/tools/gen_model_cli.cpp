// `turbokv gen-model --arch llama|qwen2|qwen3|phi3|qwen3moe|gemma3|qwen35|qwen35moe|smollm3|granite|olmo2 --layers L --dim D --heads H
// --kv-heads K --head-dim HD --ffn F [--vocab-from VOCAB.gguf] --type T -o OUT.gguf`
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "model/gen_model.h"
#include "tools/common_flags.h"
#include "tools/subcommands.h"

namespace tkv {

void register_gen_model(CLI::App& app) {
  auto o = std::make_shared<GenModelOptions>();
  auto vocab = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("gen-model", "Write a GGUF model with random weights (any shape)");
  cmd->add_option("--arch", o->arch, "llama, qwen2, qwen3, phi3, qwen3moe, gemma3, qwen35, qwen35moe, smollm3, granite or olmo2 (checked by gen-model)");
  cmd->add_option("--experts", o->experts, "qwen3moe/qwen35moe: experts per layer (--ffn is each one's width)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--experts-used", o->experts_used, "qwen3moe/qwen35moe: experts per token")->check(CLI::Range(1, 4096));
  cmd->add_option("--shared-ffn", o->shared_ffn, "qwen35moe: the shared expert's width (default --ffn)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--window", o->window, "gemma3: sliding window of the local layers")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--swa-period", o->swa_period, "gemma3: every N-th layer is global (default 6)")->check(CLI::Range(1, 1024));
  cmd->add_option("--ssm-groups", o->ssm_groups, "qwen35: Gated DeltaNet key heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--ssm-v-heads", o->ssm_v_heads, "qwen35: Gated DeltaNet value heads")->check(CLI::Range(1, 4096));
  cmd->add_option("--ssm-state", o->ssm_state, "qwen35: Gated DeltaNet head dim (state size)")->check(CLI::Range(2, 1024));
  cmd->add_option("--ssm-conv", o->ssm_conv, "qwen35: causal convolution width")->check(CLI::Range(2, 64));
  cmd->add_option("--full-attn-interval", o->full_attn_interval, "qwen35: one layer in N has full attention")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--rope-base", o->rope_base, "rotary base (default: the architecture's)");
  cmd->add_option("--rope-dims", o->rope_dims, "rotated dims per head (default head dim; qwen35 a quarter)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--layers", o->layers, "blocks")->check(CLI::Range(1, 1024));
  cmd->add_option("--dim", o->dim, "embedding size")->check(CLI::Range(1, 65536));
  cmd->add_option("--heads", o->heads, "query heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-heads", o->kv_heads, "KV heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--head-dim", o->head_dim, "head dim")->check(CLI::Range(2, 1024));
  cmd->add_option("--ffn", o->ffn, "feed-forward size")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--ctx", o->ctx, "trained context to record")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--type", o->type, "weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4");
  cmd->add_option("--vocab-from", *vocab, "copy the tokenizer of this GGUF file");
  cmd->add_flag("--harmony-vocab", o->harmony_vocab,
               "gpt-oss: add o200k_harmony's special tokens and conventions to the --vocab-from BPE vocabulary");
  cmd->add_option("--vocab", o->vocab, "synthetic vocabulary size when no --vocab-from");
  cmd->add_option("--seed", o->seed, "random seed");
  cmd->add_option("--rope-orig-ctx", o->rope_orig_ctx,
                  "phi3: write LongRoPE factors (long and short) switching at this original context, "
                  "and the attention factor for --ctx over it (default 0: none)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--llama3-rope", o->llama3_rope_ctx,
                  "llama: write rope_freqs.weight, Llama 3's RoPE factors (factor 8, low 1, high 4) for this "
                  "original context (default 0: none)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--yarn-factor", o->yarn_factor, "YaRN: rope.scaling.type yarn with this factor (default 0: none)")
      ->check(finite_range(0.0, 1e4));
  cmd->add_option("--yarn-orig-ctx", o->yarn_orig_ctx, "YaRN: rope.scaling.original_context_length")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--embedding-scale", o->embedding_scale, "granite: embedding scale")->check(finite_range(0.0, 1e6));
  cmd->add_option("--residual-scale", o->residual_scale, "granite: residual scale")->check(finite_range(0.0, 1e6));
  cmd->add_option("--attention-scale", o->attention_scale, "granite: softmax scale (attention.scale)")->check(finite_range(0.0, 1e6));
  cmd->add_option("--logit-scale", o->logit_scale, "granite: logits divided by it")->check(finite_range(0.0, 1e6));
  cmd->add_option("-o,--output", *out, "output GGUF")->required();
  cmd->callback([o, vocab, out]() {
    std::shared_ptr<gguf::File> v;
    if (!vocab->empty()) {
      auto f = gguf::File::open(*vocab);
      if (!f) {
        std::cerr << "turbokv gen-model: error: " << f.error() << "\n";
        throw CLI::RuntimeError(1);
      }
      v = *f;
    }
    Status s = generate_model(*o, v.get(), *out);
    if (!s.ok()) {
      std::cerr << "turbokv gen-model: error: " << s.message() << "\n";
      throw CLI::RuntimeError(1);
    }
    std::cerr << "wrote " << *out << "\n";
  });
}

}  // namespace tkv
