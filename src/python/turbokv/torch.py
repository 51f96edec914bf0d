"""turbokv.torch: a compressed KV cache for a PyTorch attention loop.

    import torch, turbokv.torch as tkt
    cache = tkt.CompressedKVCache(n_layers=8, n_kv_heads=4, head_dim=64, formats="tq4")
    for layer in range(8):
        ...                                   # q, k, v of this step's tokens (K after RoPE)
        cache.append(layer, k, v)             # [n, n_kv_heads, head_dim] (or [1, n_kv_heads, n, head_dim])
        out = cache.attend(layer, q)          # [n, n_heads, head_dim]: causal attention on the codes
    cache.nbytes                              # bytes the codes hold (at capacity)

The rows are coded as they are appended (rotation + Lloyd-Max codes, the
engine's KvCache through the C API, with its exact mean centring) and never
decoded: attention runs on the codes. Unlike a cache that hands back
dequantized K/V for the model's own attention (HF's QuantizedCache, HQQ,
quanto), this one does the attention itself, so the full-precision K/V of
past tokens are never materialized. Tensors on the CPU; float16, bfloat16
and float64 are converted to float32 (the codecs' input), results come back
in the query's dtype and layout.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

from . import DEFAULT_SEED, _turbokv

__all__ = ["CompressedKVCache"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class CompressedKVCache:
    """A compressed KV cache of n_layers layers for a PyTorch model.

    CompressedKVCache(n_layers, n_kv_heads, head_dim, formats="tq4", *,
                      preset=None, policy=None, capacity=4096,
                      mean_center=True, mean_tokens=64, seed=DEFAULT_SEED,
                      threads=1, check_finite=True)

    formats: one format for K and V ("tq4", "tq3.5-ip", "q8_0", "f16", ...)
        or a pair (k_format, v_format).
    preset: "quality", "balanced", "compact", "tiny" or "tiny-e8" (formats
        per layer, as `turbokv run --kv-preset`), instead of formats.
    policy: a policy file from `turbokv calibrate` / Model.calibrate (per
        layer and head), instead of formats; its shape must be this cache's.
    capacity: tokens per layer (memory is reserved for them up front).
    mean_center: exact mean centring for tq formats: the first mean_tokens
        rows of each layer are held as f16 until they fix the per-head
        means, then every row is coded with its mean subtracted (added back
        exactly in attention), as the engine does.
    seed: K's rotation seed (the tools' default: `turbokv run` writes the
        same codes for the same rows); V's is seed ^ 0x5555555555555555, as
        in the engine (a Codec(fmt, d, seed) codes K rows as this cache).
    threads: threads of the attention kernel.
    check_finite: raise ValueError on NaN/Inf in appended rows (else the
        engine's behaviour: such a row is stored as zeros).

    Use one cache from one thread at a time (calls release the GIL).
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int,
                 formats: Union[str, Tuple[str, str], Sequence[str]] = "tq4", *, preset: Optional[str] = None,
                 policy: Optional[str] = None, capacity: int = 4096, mean_center: bool = True,
                 mean_tokens: int = 64, seed: int = DEFAULT_SEED, threads: int = 1, check_finite: bool = True):
        if isinstance(formats, str):
            type_k = type_v = formats
        else:
            fs = list(formats)
            if len(fs) != 2 or not all(isinstance(f, str) for f in fs):
                raise ValueError(f"formats must be a format name or a (k_format, v_format) pair, got {formats!r}")
            type_k, type_v = fs
        self.n_layers, self.n_kv_heads, self.head_dim = int(n_layers), int(n_kv_heads), int(head_dim)
        self.capacity, self.threads, self.check_finite = int(capacity), int(threads), bool(check_finite)
        self.formats = (type_k, type_v)
        self.preset, self.policy = preset, policy
        self._args = (self.n_layers, self.n_kv_heads, self.head_dim, self.capacity, type_k, type_v, preset,
                      None if policy is None else str(policy), bool(mean_center), int(mean_tokens), int(seed))
        self._c = _turbokv._Cache(*self._args)

    # ------------------------------------------------------------- helpers
    def _layer(self, layer: int) -> int:
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer must be an int in [0, {self.n_layers}), got {layer!r}")
        return layer

    def _rows(self, x, what: str, heads: Optional[int]):
        """x as float32 [n, heads, head_dim] contiguous, and whether it came as [1, heads, n, head_dim]."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
        hs = "n_heads" if heads is None else str(heads)
        want = (f"{what} must be [n, {hs}, {self.head_dim}] or [1, {hs}, n, {self.head_dim}] "
                f"(floating point, on the CPU)")
        if x.device.type != "cpu":
            raise ValueError(f"{want}, got a tensor on {x.device} (move it with .cpu())")
        if x.dtype not in _FLOATS:
            raise TypeError(f"{want}, got {x.dtype}")
        hf = x.dim() == 4
        if hf:
            if x.shape[0] != 1:
                raise ValueError(f"{want}, got {list(x.shape)} (one sequence per cache: batch 1)")
            x = x[0].transpose(0, 1)
        if x.dim() != 3 or x.shape[2] != self.head_dim or (heads is not None and x.shape[1] != heads):
            raise ValueError(f"{want}, got {list(x.shape)}")
        return x.detach().to(torch.float32).contiguous(), hf

    # ----------------------------------------------------------------- API
    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Codes and stores n new tokens' K and V rows of one layer, after the
        tokens it holds: k, v are [n, n_kv_heads, head_dim] (or HF's
        [1, n_kv_heads, n, head_dim]), K after RoPE. Raises MemoryError past
        the capacity, ValueError on NaN/Inf (check_finite)."""
        layer = self._layer(layer)
        ka, _ = self._rows(k, "k", self.n_kv_heads)
        va, _ = self._rows(v, "v", self.n_kv_heads)
        if ka.shape != va.shape:
            raise ValueError(f"k and v must have the same shape, got {list(ka.shape)} and {list(va.shape)}")
        if self.check_finite:
            for name, x in (("k", ka), ("v", va)):
                bad = ~torch.isfinite(x)
                if bool(bad.any()):
                    t, h, i = (int(j) for j in bad.nonzero()[0])
                    raise ValueError(f"{name} holds {x[t, h, i].item()} at token {t}, head {h}, element {i} "
                                     f"(layer {layer}); nothing was appended")
        self._c.append(layer, self._c.layer_tokens(layer), ka.numpy(), va.numpy())

    def attend(self, layer: int, q: torch.Tensor, causal: bool = True, scale: Optional[float] = None) -> torch.Tensor:
        """Attention of q on layer's stored tokens, on the codes.

        q: [n_q, n_heads, head_dim] (or [1, n_heads, n_q, head_dim]), n_heads
        a multiple of n_kv_heads (grouped-query: head h reads KV head
        h // (n_heads // n_kv_heads)). causal=True: the queries are the
        last n_q tokens appended, query i sees tokens j <= n - n_q + i;
        causal=False: every query sees every stored token. scale: the
        softmax scale (None: 1/sqrt(head_dim)). Returns softmax(q K^T scale) V
        in q's dtype and layout.
        """
        layer = self._layer(layer)
        qa, hf = self._rows(q, "q", None)
        n_q, hq = qa.shape[0], qa.shape[1]
        n = self._c.layer_tokens(layer)
        s = 0.0 if scale is None else float(scale)
        if n == 0:
            raise ValueError(f"layer {layer} holds no tokens: append K/V before attend")
        if causal:
            if n_q > n:
                raise ValueError(f"{n_q} causal queries but layer {layer} holds {n} tokens (append the "
                                 f"queries' own K/V first)")
            out = torch.from_numpy(self._c.attention(layer, qa.numpy(), n - n_q, s, self.threads))
        else:
            # Every query sees all n tokens: the queries as extra heads of one
            # query at the last position, grouped by the KV head they read.
            if hq % self.n_kv_heads:
                raise ValueError(f"q has {hq} heads, not a multiple of n_kv_heads {self.n_kv_heads}")
            g = hq // self.n_kv_heads
            qq = qa.reshape(n_q, self.n_kv_heads, g, self.head_dim).permute(1, 0, 2, 3).reshape(1, -1, self.head_dim)
            o = torch.from_numpy(self._c.attention(layer, qq.contiguous().numpy(), n - 1, s, self.threads))
            out = o.reshape(self.n_kv_heads, n_q, g, self.head_dim).permute(1, 0, 2, 3).reshape(n_q, hq, self.head_dim)
        if hf:
            out = out.transpose(0, 1).unsqueeze(0)
        return out.to(q.dtype)

    def seq_length(self, layer: int = 0) -> int:
        """Tokens stored in layer (HF's get_seq_length)."""
        return self._c.layer_tokens(self._layer(layer))

    get_seq_length = seq_length

    def __len__(self) -> int:
        """Tokens stored in layer 0."""
        return self._c.layer_tokens(0)

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds for K and V codes: reserved at creation for
        `capacity` tokens of every layer (f16 staging of the first rows and
        the per-head means, a few KiB, not counted)."""
        return self._c.nbytes

    @property
    def bits_per_value(self) -> float:
        """Stored bits per K/V value, averaged over layers: 8 * nbytes /
        (capacity * n_layers * 2 * n_kv_heads * head_dim)."""
        return 8.0 * self.nbytes / (self.capacity * self.n_layers * 2 * self.n_kv_heads * self.head_dim)

    def dense_nbytes(self, dtype: torch.dtype = torch.float16) -> int:
        """Bytes an uncompressed cache of the same capacity takes in dtype
        (for the compression ratio: dense_nbytes() / nbytes)."""
        el = torch.tensor([], dtype=dtype).element_size()
        return self.capacity * self.n_layers * 2 * self.n_kv_heads * self.head_dim * el

    def reset(self) -> None:
        """Empties the cache (a new one with the same settings)."""
        self._c = _turbokv._Cache(*self._args)

    def __repr__(self) -> str:
        how = (f"preset={self.preset!r}" if self.preset else f"policy={self.policy!r}" if self.policy
               else f"formats={self.formats!r}")
        return (f"CompressedKVCache(n_layers={self.n_layers}, n_kv_heads={self.n_kv_heads}, "
                f"head_dim={self.head_dim}, {how}, capacity={self.capacity}, tokens={len(self)}, "
                f"nbytes={self.nbytes})")
