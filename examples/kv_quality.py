#!/usr/bin/env python3
"""How well each KV format keeps your model's keys and values.

Save K (and V) vectors from any model as .npy arrays of shape
[heads, tokens, head_dim] (or [tokens, head_dim] for one head), e.g. from a
PyTorch forward hook: np.save("keys.npy", k[0].float().cpu().numpy()) with k
of shape [batch, heads, tokens, head_dim]. Then:

    python3 examples/kv_quality.py keys.npy values.npy
    python3 examples/kv_quality.py keys.npy --formats q8_0,q4_0,tq3,tq4 --calibrated

prints, per format, its size and the error it makes (plain, and with exact
mean centring): relative MSE, cosine, and the relative error of the
attention output over random queries. Needs the turbokv module (make; then
PYTHONPATH=build/python, or make install).
"""
import argparse
import sys

import numpy as np

import turbokv


def load(path):
    x = np.load(path)
    if x.ndim not in (2, 3):
        sys.exit(f"{path}: expected [heads, tokens, head_dim] or [tokens, head_dim], got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        sys.exit(f"{path}: expected floating-point values, got {x.dtype}")
    return np.ascontiguousarray(x, dtype=np.float32)


def table(name, rows):
    plain = {r["format"]: r for r in rows if not r["mean_centered"]}
    centred = {r["format"]: r for r in rows if r["mean_centered"]}
    print(f"\n{name}")
    head = f"{'format':<10} {'bits/val':>8} {'vs f16':>7} | {'rel MSE':>9} {'cosine':>8} {'attn err':>9}"
    if centred:
        head += f" | {'centred: rel MSE':>16} {'attn err':>9}"
    print(head)
    print("-" * len(head))
    for fmt, r in plain.items():
        line = (f"{fmt:<10} {r['bits_per_value']:>8.3f} {r['size_vs_f16']:>6.2f}x | "
                f"{r['rel_mse']:>9.2e} {r['cosine']:>8.5f} {r['attn_rel_err']:>9.2e}")
        if fmt in centred:
            c = centred[fmt]
            line += f" | {c['rel_mse']:>16.2e} {c['attn_rel_err']:>9.2e}"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("keys", help=".npy of keys, [heads, tokens, head_dim]")
    ap.add_argument("values", nargs="?", help=".npy of values (optional)")
    ap.add_argument("--formats", default="f16,q8_0,q4_0,tq2,tq3,tq3.5,tq4,tq4.5",
                    help="comma-separated formats, or all")
    ap.add_argument("--calibrated", action="store_true",
                    help="fit a per-head basis on the first half of the tokens and measure on the second "
                         "(then tqc formats may be listed)")
    ap.add_argument("--no-mean-center", action="store_true", help="measure plain coding only")
    a = ap.parse_args()
    keys = load(a.keys)
    values = load(a.values) if a.values else None
    try:
        r = turbokv.kv_stats(keys, values, formats=a.formats, mean_center=not a.no_mean_center,
                             calibrated=a.calibrated)
    except (ValueError, TypeError) as e:
        sys.exit(f"kv_quality: {e}")
    shape = " x ".join(str(n) for n in keys.shape)
    table(f"keys ({a.keys}: {shape})", r["keys"])
    if values is not None:
        table(f"values ({a.values})", r["values"])


if __name__ == "__main__":
    main()
