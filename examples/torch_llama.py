#!/usr/bin/env python3
"""A llama forward pass written in PyTorch, on turbokv's compressed KV cache.

The GGUF is read through turbokv (turbokv.Model: its tokenizer, its
hyperparameters as Model.config, its weights as Model.tensor(name), decoded
to float32 and wrapped by torch.from_numpy without a copy); the layers are
plain PyTorch (RMSNorm, RoPE, SwiGLU); attention runs on the codes of
turbokv.torch.CompressedKVCache. Greedy decoding prints the same text as

    turbokv run -m MODEL -p PROMPT -n N --temp 0 -c CTX -ctk FMT -ctv FMT --no-display-prompt

(tests/python/test_torch.py checks it on ref-5m-f32.gguf).

    PYTHONPATH=build/python python3 examples/torch_llama.py ../shared/models/ref-5m/ref-5m-f32.gguf \\
        -p "Once upon a time" -n 40 --cache tq4
"""
import argparse
import sys

import torch

import turbokv
from turbokv.torch import CompressedKVCache


class Llama:
    """llama / qwen2 / qwen3 (dense) weights as float32 tensors and the forward pass."""

    def __init__(self, path: str, ctx: int):
        self.m = turbokv.Model(path, ctx=ctx, threads=1)  # the tokenizer and the GGUF reader
        c = self.m.config
        if c["arch"] not in ("llama", "qwen2", "qwen3"):
            sys.exit(f"torch_llama: {c['arch']} is not a dense llama-like model")
        self.c = c
        names = self.m.tensors

        def w(name):
            return torch.from_numpy(self.m.tensor(name)) if name in names else None

        self.tok_embd = w("token_embd.weight")                      # [n_vocab, n_embd]
        self.out_norm = w("output_norm.weight")
        self.output = w("output.weight")
        if self.output is None:
            self.output = self.tok_embd                             # tied embeddings
        self.layers = []
        for i in range(c["n_layer"]):
            p = f"blk.{i}."
            self.layers.append({k: w(p + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                "ffn_down", "attn_q_norm", "attn_k_norm")})
            for b, t in (("bq", "attn_q"), ("bk", "attn_k"), ("bv", "attn_v")):
                self.layers[-1][b] = w(p + t + ".bias")
        hd, dims = c["head_dim"], c["rope_dims"]
        # RoPE as the engine computes it: theta = (pos / scale) * base^(-2i/dims) in float32.
        self.inv_freq = torch.tensor([c["rope_base"] ** (-2.0 * i / dims) for i in range(dims // 2)],
                                     dtype=torch.float32)
        self.hd, self.dims = hd, dims

    def rmsnorm(self, x, w):
        # 1 / sqrt(mean(x^2) + eps) in float64, then x * inv * w in float32 (the engine's order).
        inv = (1.0 / torch.sqrt((x.double() ** 2).mean(-1, keepdim=True) + self.c["eps"])).float()
        return x * inv * w

    def rope(self, x, pos0):
        # x: [n, heads, hd]; pairs (2i, 2i + 1), or (i, i + dims/2) for NEOX.
        n, dims = x.shape[0], self.dims
        p = torch.arange(pos0, pos0 + n, dtype=torch.float32) / self.c["rope_scale"]
        theta = p[:, None] * self.inv_freq[None, :]
        cs, sn = torch.cos(theta)[:, None, :], torch.sin(theta)[:, None, :]
        x = x.clone()
        if self.c["rope_neox"]:
            a, b = x[..., : dims // 2].clone(), x[..., dims // 2: dims].clone()
            x[..., : dims // 2], x[..., dims // 2: dims] = a * cs - b * sn, a * sn + b * cs
        else:
            a, b = x[..., 0:dims:2].clone(), x[..., 1:dims:2].clone()
            x[..., 0:dims:2], x[..., 1:dims:2] = a * cs - b * sn, a * sn + b * cs
        return x

    @torch.no_grad()
    def forward(self, tokens, pos0: int, cache: CompressedKVCache):
        """Runs tokens at positions [pos0, pos0 + n) and returns the last one's logits."""
        c, hd = self.c, self.hd
        n = len(tokens)
        x = self.tok_embd[torch.tensor(tokens)]
        for i, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["attn_norm"])
            q, k, v = h @ L["attn_q"].T, h @ L["attn_k"].T, h @ L["attn_v"].T
            if L["bq"] is not None:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = q.reshape(n, c["n_head"], hd)
            k = k.reshape(n, c["n_head_kv"], hd)
            v = v.reshape(n, c["n_head_kv"], hd)
            if L["attn_q_norm"] is not None:
                q, k = self.rmsnorm(q, L["attn_q_norm"]), self.rmsnorm(k, L["attn_k_norm"])
            q, k = self.rope(q, pos0), self.rope(k, pos0)
            cache.append(i, k, v)                                   # coded, never decoded
            a = cache.attend(i, q)                                  # causal, on the codes
            x = x + a.reshape(n, -1) @ L["attn_output"].T
            h = self.rmsnorm(x, L["ffn_norm"])
            x = x + (torch.nn.functional.silu(h @ L["ffn_gate"].T) * (h @ L["ffn_up"].T)) @ L["ffn_down"].T
        return self.rmsnorm(x[-1], self.out_norm) @ self.output.T

    def generate(self, prompt: str, n: int, cache: CompressedKVCache):
        """Greedy: the generated tokens and their text."""
        toks = self.m.tokenize(prompt, True)
        logits = self.forward(toks, 0, cache)
        out = []
        eos = self.m.info["eos"]
        for _ in range(n):
            t = int(torch.argmax(logits))
            if t == eos:
                break
            out.append(t)
            logits = self.forward([t], len(toks) + len(out) - 1, cache)
        # The text the generated tokens add after the prompt's.
        text = self.m.detokenize(toks + out)[len(self.m.detokenize(toks)):]
        return out, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("-p", "--prompt", default="Once upon a time")
    ap.add_argument("-n", type=int, default=40, help="tokens to generate")
    ap.add_argument("-c", "--ctx", type=int, default=256, help="cache capacity in tokens")
    ap.add_argument("--cache", default="tq4", help="K format (and V's unless --cache-v)")
    ap.add_argument("--cache-v", default=None)
    ap.add_argument("--preset", default=None, help="a KV preset instead of formats (quality, balanced, compact)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = Llama(a.model, a.ctx)
    c = model.c
    cache = CompressedKVCache(c["n_layer"], c["n_head_kv"], c["head_dim"], (a.cache, a.cache_v or a.cache),
                              preset=a.preset, capacity=a.ctx)
    _, text = model.generate(a.prompt, a.n, cache)
    print(text)
    print(f"torch_llama: {len(cache)} tokens cached in {cache.nbytes} bytes at capacity {cache.capacity} "
          f"({cache.bits_per_value:.3f} bits per value; f16 would take {cache.dense_nbytes()} bytes)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
