#!/usr/bin/env python3
"""RESULTS §24: replicas sharing KV blocks through Redis.

For each cache format: redis-server and two replicas (A, B) of
`turbokv serve --kv-store`, each warmed by one 301-token request; a document of DOC tokens (seeded random ids)
plus a short question is asked on A (cold: time to first token = a full
prefill), then, once A's blocks are written, the same on B (time to first
token from the store). Prints B's tokens taken from the store, the bytes per
token moved, the store's read throughput (bytes read / lookup time on B),
and `redis-benchmark` GETs of the same value size on the same Redis.

Usage: kvstore-bench.py MODEL DOC_TOKENS FORMAT[,FORMAT...] [THREADS]
FORMAT: f16, q8_0, tq4 or policy=FILE. Env: TKV_BIN (default build/turbokv).
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "kvstore"))
import kvstore_test as kt  # noqa: E402  (Redis, metrics, http)


def serve(tmp, name, model, flags, store, threads, ctx):
    log = os.path.join(tmp, name + ".log")
    args = [kt.BIN, "serve", "-m", model, "--port", "0", "-np", "1", "-c", str(ctx), "--kv-budget", "3GiB",
            "-t", str(threads), "--kv-store", store, "--kv-store-deadline", "20000"] + flags
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    for _ in range(6000):
        m = re.search(r"^listening on http://127\.0\.0\.1:(\d+)", open(log, errors="replace").read(), re.M)
        if m:
            return p, f"http://127.0.0.1:{m.group(1)}"
        if p.poll() is not None:
            sys.exit(open(log).read())
        time.sleep(0.1)
    sys.exit("server did not start")


def ttft(url, prompt):
    t0 = time.time()
    kt.http(url + "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0}, timeout=7200)
    return time.time() - t0


def load():
    return os.getloadavg()[0]


def main():
    model, n, formats = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    rnd = random.Random(24)
    docu = [1] + [rnd.randrange(3, 32000) for _ in range(n - 1)]
    question = [rnd.randrange(3, 32000) for _ in range(16)]
    tmp = tempfile.mkdtemp(prefix="tkv-kvbench-")
    redis = kt.Redis(tmp)
    redis.client().cmd("CONFIG", "SET", "maxmemory", "4gb")
    try:
        for fmt in formats:
            flags = ["--kv-policy", fmt.split("=", 1)[1]] if fmt.startswith("policy=") else ["-ctk", fmt, "-ctv", fmt]
            name = "calibrated policy" if fmt.startswith("policy=") else fmt
            a, ua = serve(tmp, "a", model, flags, redis.url(), threads, n + 256)
            b, ub = serve(tmp, "b", model, flags, redis.url(), threads, n + 256)
            # Both replicas in their steady state: weights paged in, threads
            # started, the store's read connection made (a prompt longer than
            # a block looks its blocks up: misses).
            for i, u in enumerate((ua, ub)):
                ttft(u, [1] + [rnd.randrange(3, 32000) for _ in range(300)])
            la = load()
            cold = ttft(ua, docu + question)
            full = (n + len(question) - 1) // 256
            for _ in range(600):
                if kt.metrics(ua).get("kv_store_blocks_written_total", 0) >= full:
                    break
                time.sleep(0.1)
            lb = load()
            warm = ttft(ub, docu + question)
            mb = kt.metrics(ub)
            ma = kt.metrics(ua)
            hit = mb["kv_store_hit_tokens_total"]
            read = mb["kv_store_bytes_read_total"]
            blocks = mb["kv_store_blocks_read_total"]
            rate = read / mb["kv_store_lookup_seconds_total"] if mb["kv_store_lookup_seconds_total"] else 0
            value = int(read / blocks) if blocks else 0
            print(f"{name}: prompt {n + len(question)} tokens; A (cold) TTFT {cold:.2f} s (load {la:.2f}); "
                  f"B TTFT {warm:.3f} s (load {lb:.2f}) = {cold / warm:.1f}x; B took {hit:.0f} tokens from the store, "
                  f"evaluated {mb['prompt_tokens_evaluated_total']:.0f}; {read / max(hit, 1):.0f} bytes/token read "
                  f"({ma['kv_store_bytes_written_total'] / max(ma['kv_store_blocks_written_total'], 1):.0f} bytes a "
                  f"value written); lookup {mb['kv_store_lookup_seconds_total']:.3f} s for {blocks:.0f} values of "
                  f"{value} bytes = {rate / 1e9:.2f} GB/s", flush=True)
            for p in (a, b):
                p.terminate()
                p.wait(30)
            if value:
                # The same value size through redis-benchmark: one connection, the same pipelining.
                P = max(int(blocks), 1)
                out = subprocess.run(["redis-benchmark", "-p", str(redis.port), "-a", kt.PASSWORD, "-t", "set,get",
                                      "-n", str(P * 8), "-c", "1", "-P", str(P), "-d", str(value), "--csv"],
                                     capture_output=True, text=True).stdout
                rps = [float(l.split(",")[1].strip('"')) for l in out.splitlines() if l.startswith('"GET"')]
                if rps:
                    rb = rps[0] * value
                    print(f"  redis-benchmark GET -d {value} -P {P} -c 1: {rps[0]:.1f} requests/s = {rb / 1e9:.2f} GB/s; "
                          f"the store's reads at {rate / rb:.0%} of it (load {load():.2f})", flush=True)
            redis.client().cmd("FLUSHALL")
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
