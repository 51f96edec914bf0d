"""turbokv: a compressed KV cache (seeded rotation + Lloyd-Max codes) and the
LLM engine around it, from Python.

Arrays in, arrays out: every function that takes rows takes a NumPy array or
a CPU PyTorch tensor, C-contiguous, of the stated dtype, and returns the kind
it was given (a tensor result shares the memory of the array the call made:
torch.from_numpy, no copy; a tensor input is read in place, no copy either).
Shapes are written as float32[n, d]: n rows of head_dim d floats.

    Codec(format, d, seed)       quantize float32[n, d] -> uint8[n, row_bytes] and back
    calibrate(rows, "tqc4")      a per-head calibrated Codec
    codebook(d, bits)            the Lloyd-Max codebook of a rotated coordinate
    rotate(x, seed)              the rotated formats' orthogonal transform
    attention(q, k_codes, ...)   softmax(q K^T scale) V on the codes
    kv_stats(keys, values)       each format's error, as `turbokv kv-stats --json`
    Model(path, cache="tq4")     a GGUF model on a compressed cache
    turbokv.torch.CompressedKVCache   a per-layer compressed KV cache for a PyTorch model

The module calls only the C API (include/turbokv.h); errors are ValueError
(bad argument or value), TypeError (wrong dtype or type), OSError (files),
MemoryError, with a message that names what was wrong.
"""
from __future__ import annotations

import sys as _sys

from . import _turbokv
from ._turbokv import DEFAULT_SEED, Model

__version__: str = _turbokv.__version__
"""The library's version, "MAJOR.MINOR.PATCH": CMakeLists.txt's project(VERSION)."""

__all__ = ["Codec", "DEFAULT_SEED", "Model", "attention", "calibrate", "codebook", "kv_stats", "rotate",
           "__version__"]


# ------------------------------------------------------------ torch tensors

def _torch_tensor(x):
    """x when it is a torch.Tensor (torch already imported by the caller), else None."""
    torch = _sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x
    return None


def _as_array(x, what: str, dtype: str, expected: str):
    """(a NumPy view of x, whether x was a tensor). A tensor must be on the
    CPU, of `dtype`, C-contiguous: then its memory is read in place
    (Tensor.numpy(), no copy). Arrays pass through (the core checks them)."""
    t = _torch_tensor(x)
    if t is None:
        return x, False
    want = f"{what} must be a C-contiguous {expected} array or tensor"
    shape = "[" + ", ".join(str(s) for s in t.shape) + "]"
    got = str(t.dtype).replace("torch.", "")
    if t.device.type != "cpu":
        raise ValueError(f"{want}, got a tensor on {t.device} (move it with .cpu())")
    if got != dtype:
        raise TypeError(f"{want}, got torch.{got}{shape} (convert it with .to(torch.{dtype}))")
    if not t.is_contiguous():
        raise ValueError(f"{want}, got a non-contiguous torch.{got}{shape} (use .contiguous())")
    return t.detach().numpy(), True


def _result(a, as_tensor: bool):
    """a as a tensor sharing its memory (torch.from_numpy) when the input was one."""
    if as_tensor:
        import torch
        return torch.from_numpy(a)
    return a


# ------------------------------------------------------------------ codecs

class Codec:
    """A KV row format for one head dim: quantize float32 rows to bytes and back.

    Codec(format="tq4", d=128, seed=DEFAULT_SEED)

    format: f32, f16, bf16, q8_0, q4_0, q8_0r, q4_0r, tq1..tq8, tq1.5..tq7.5,
    with -nc or -ip (tq4-ip); d: the head dim (8..1024 for rotated formats);
    seed: the rotation (the tools' default). Each row of d floats becomes
    row_bytes bytes (tq4 at d=128: 66 bytes, 4.125 bits per value).
    Immutable and thread-safe; calls release the GIL.
    """

    __slots__ = ("_c",)

    def __init__(self, format: str = "tq4", d: int = 128, seed: int = DEFAULT_SEED):
        self._c = _turbokv.Codec(format, d, seed)

    @classmethod
    def _wrap(cls, core):
        c = cls.__new__(cls)
        c._c = core
        return c

    @property
    def format(self) -> str:
        """The format's name, as given ("tq4")."""
        return self._c.format

    @property
    def d(self) -> int:
        """The head dim: floats per row."""
        return self._c.d

    @property
    def row_bytes(self) -> int:
        """Bytes per coded row."""
        return self._c.row_bytes

    @property
    def bits_per_value(self) -> float:
        """Stored bits per value: 8 * row_bytes / d (norms and scales included)."""
        return self._c.bits_per_value

    @property
    def mean(self):
        """float32[d] NumPy array: the mean a calibrated codec was fitted with
        (it codes x - mean); zeros for other codecs."""
        return self._c.mean

    def quantize(self, x, out=None):
        """Codes rows: float32[n, d] -> uint8[n, row_bytes].

        x: a C-contiguous float32[n, d] NumPy array or CPU tensor (finite;
        a NaN or Inf raises ValueError naming the row and element).
        out: an optional uint8[n, row_bytes] array or tensor to write into
        (no new array per call). Returns the codes, of x's kind.
        """
        a, t = _as_array(x, "x", "float32", f"float32[n, {self.d}]")
        o, _ = _as_array(out, "out", "uint8", f"uint8[n, {self.row_bytes}]") if out is not None else (None, False)
        r = self._c.quantize(a, o)
        return out if out is not None else _result(r, t)

    def dequantize(self, codes, out=None):
        """Decodes rows: uint8[n, row_bytes] -> float32[n, d] (of codes' kind).

        out: an optional float32[n, d] array or tensor to write into.
        """
        a, t = _as_array(codes, "codes", "uint8", f"uint8[n, {self.row_bytes}]")
        o, _ = _as_array(out, "out", "float32", f"float32[n, {self.d}]") if out is not None else (None, False)
        r = self._c.dequantize(a, o)
        return out if out is not None else _result(r, t)

    def __repr__(self) -> str:
        return repr(self._c)


def _core_codec(c, what: str):
    if isinstance(c, Codec):
        return c._c
    if isinstance(c, _turbokv.Codec):
        return c
    raise TypeError(f"{what} must be a turbokv.Codec, got {type(c).__name__}")


def calibrate(rows, format: str = "tqc4") -> Codec:
    """Fits a calibrated codec (format "tqcB", B coded bits per value) to
    rows of one head: float32[n, d] (n >= 2, finite), array or tensor. The
    codec codes x - codec.mean, in a basis fitted to the rows, with bits per
    component by variance; it has tqB's size."""
    a, _ = _as_array(rows, "rows", "float32", "float32[n, d]")
    return Codec._wrap(_turbokv.calibrate(a, format))


def codebook(d: int, bits: int) -> dict:
    """The Lloyd-Max codebook tq formats use for one coordinate of a rotated
    unit vector of dimension d (2..65536) at bits (1..8): a dict with
    'centroids' (float64[2**bits], ascending), 'boundaries'
    (float64[2**bits - 1]), 'mse_coord' (expected squared error of one
    coordinate of a unit vector), 'mse_vector' (d * mse_coord), 'd', 'bits'."""
    return _turbokv.codebook(d, bits)


def rotate(x, seed: int = DEFAULT_SEED, inverse: bool = False):
    """The seeded orthogonal transform R the rotated formats apply before
    coding: float32[n, d] -> R x per row (inverse=True: R^T x), as a new
    array of x's kind. d a power of two: a randomized Hadamard transform
    H D / sqrt(d); else a dense Haar-random orthogonal matrix. d in 2..4096."""
    a, t = _as_array(x, "x", "float32", "float32[n, d]")
    return _result(_turbokv.rotate(a, seed, inverse), t)


def attention(q, k_codes, v_codes, k_codec, v_codec, causal_offset: int = -1, scale: float = 0.0, mu_k=None,
              mu_v=None, sparse_v: float = 0.0, threads: int = 1, keys: str = "default"):
    """softmax(q K^T * scale) V computed on the codes, without decoding rows.

    q: float32[n_q, n_q_heads, d]; k_codes: uint8[n_kv, n_kv_heads,
    k_codec.row_bytes]; v_codes: uint8[n_kv, n_kv_heads, v_codec.row_bytes]
    (n_q_heads a multiple of n_kv_heads: grouped-query attention, query head
    h reads KV head h // (n_q_heads // n_kv_heads)). causal_offset: query i
    sees tokens j <= causal_offset + i (< 0: all). scale 0: 1/sqrt(d).
    mu_k, mu_v: float32[n_kv_heads, d] means the rows were coded without
    (added back exactly), or None. sparse_v: skip V rows weighted below this
    times the largest weight (0: off). keys: "exact" decodes every code to
    float32; "int8" scores K and accumulates V of tq/tqc rows on 8-bit
    integers (AVX-512 VBMI + VNNI; within 2% of the codecs' own error);
    "default": int8 where available. Returns float32[n_q, n_q_heads, d], a
    tensor when q is one. Arrays or CPU tensors; the GIL is released.
    """
    qa, t = _as_array(q, "q", "float32", "float32[n_q, n_q_heads, d]")
    ka, _ = _as_array(k_codes, "k_codes", "uint8", "uint8[n_kv, n_kv_heads, row_bytes]")
    va, _ = _as_array(v_codes, "v_codes", "uint8", "uint8[n_kv, n_kv_heads, row_bytes]")
    mk, _ = _as_array(mu_k, "mu_k", "float32", "float32[n_kv_heads, d]")
    mv, _ = _as_array(mu_v, "mu_v", "float32", "float32[n_kv_heads, d]")
    out = _turbokv.attention(qa, ka, va, _core_codec(k_codec, "k_codec"), _core_codec(v_codec, "v_codec"),
                             causal_offset, scale, mk, mv, sparse_v, threads, keys)
    return _result(out, t)


def kv_stats(keys, values=None, formats="all", mean_center: bool = True, calibrated: bool = False,
             queries: int = 64, seed: int = DEFAULT_SEED, source: str = "") -> dict:
    """Each format's error on keys (and values), as `turbokv kv-stats --json`
    reports it: {'keys': [...], 'values': [...]}, one dict per (format,
    centring) with relative MSE, cosine, attention error and bits per value.

    keys, values: float32[heads, tokens, d] (or [tokens, d]: one head),
    arrays or CPU tensors. formats: a list or a comma-separated string, or
    "all". calibrated: fit tqc bases on each head's first half of tokens,
    measure on the second. queries: random queries per head for the
    attention error.
    """
    ka, _ = _as_array(keys, "keys", "float32", "float32[heads, tokens, d]")
    va, _ = _as_array(values, "values", "float32", "float32[heads, tokens, d]")
    return _turbokv.kv_stats(ka, va, formats, mean_center, calibrated, queries, seed, source)
