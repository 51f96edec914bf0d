#!/usr/bin/env python3
"""Python turbokv.Codec.quantize against the C++ codec on the same rows.

Times Codec(fmt, d=128).quantize on 1M rows, into a fresh output array per
call (as a user gets it) and into one passed as out=, and, in the same run, tkv_bench's quantize_bulk/FMT/d:128
(Codec::quantize on 1M rows into a reused buffer), alternating ROUNDS times;
prints rows/s of each and the ratio of the medians (issue 15 asks for the
Python rate within 10 % of the C++ one).

    PYTHONPATH=build/python python3 bench/python_quantize.py build/tkv_bench [ROUNDS] [FORMAT]
"""
import json
import statistics
import subprocess
import sys
import time

import numpy as np

import turbokv


def cpp_rows_per_s(bench, fmt):
    out = subprocess.run([bench, f"--benchmark_filter=^quantize_bulk/{fmt}/d:128/", "--benchmark_format=json"],
                         capture_output=True, text=True, check=True).stdout
    (b,) = json.loads(out)["benchmarks"]
    return b["items_per_second"]


def python_rows_per_s(codec, x, out=None, reps=3):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        codec.quantize(x, out=out)
        best = min(best, time.perf_counter() - t)
    return x.shape[0] / best


def main():
    bench = sys.argv[1] if len(sys.argv) > 1 else "build/tkv_bench"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    fmt = sys.argv[3] if len(sys.argv) > 3 else "tq4"
    x = np.random.default_rng(42).standard_normal((1 << 20, 128), dtype=np.float32)
    codec = turbokv.Codec(fmt, d=128)
    out = np.empty((x.shape[0], codec.row_bytes), np.uint8)
    py, py_out, cpp = [], [], []
    for r in range(rounds):
        cpp.append(cpp_rows_per_s(bench, fmt))
        py.append(python_rows_per_s(codec, x))
        py_out.append(python_rows_per_s(codec, x, out))
        print(f"round {r + 1}: C++ {cpp[-1] / 1e6:.3f} M rows/s, Python {py[-1] / 1e6:.3f} "
              f"(out= {py_out[-1] / 1e6:.3f}) M rows/s", flush=True)
    c, p, po = (statistics.median(v) for v in (cpp, py, py_out))
    print(f"{fmt} d=128, 1M rows (medians of {rounds}): C++ {c / 1e6:.3f} M rows/s; Python {p / 1e6:.3f} "
          f"(x{p / c:.3f}), into out= {po / 1e6:.3f} (x{po / c:.3f})")


if __name__ == "__main__":
    main()
