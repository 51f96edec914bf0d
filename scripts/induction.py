#!/usr/bin/python3
"""Long-context retrieval on ../shared/models/induction (its README's task), through
the Python module's decode path: BOS, random whole-word tokens, 32 needle pairs
"A B" spread over the depths, then the query block; at each A (one-token decode
on the compressed cache) the argmax must be B. Prints accuracy and the median
logit margin of B over the best other token, per format and context.
Usage: PYTHONPATH=build/python scripts/induction.py CTX[,CTX..] FORMAT[,FORMAT..] [SEED]
TKV_KEYS=exact in the environment gives the exact path to compare with."""
import os, random, re, statistics, sys
import numpy as np
import turbokv

ctxs = [int(c) for c in sys.argv[1].split(",")]
fmts = sys.argv[2].split(",")
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
shared = os.environ.get("TKV_SHARED_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
path = os.path.join(shared, "models/induction/induction.gguf")
probe = turbokv.Model(path, cache="f32", ctx=512, threads=2)
# (A piece alone loses its leading space in the text: read it after "A".)
lead = probe.tokenize("A")[-1]
words = [t for t in range(probe.config["n_vocab"]) if re.fullmatch(r"A [a-z]{2,}", probe.detokenize([lead, t]))]
bos = probe.tokenize("")[0]
del probe
for ctx in ctxs:
    rng = random.Random(seed * 1000003 + ctx)
    pairs = rng.sample(words, 64)
    needles = [(pairs[2 * i], pairs[2 * i + 1]) for i in range(32)]
    used = set(pairs)
    pool = [w for w in words if w not in used]
    body = ctx - 1 - 64 - 64
    hay = []
    for _ in range(body):
        w = rng.choice(pool)
        while hay and w == hay[-1]:
            w = rng.choice(pool)
        hay.append(w)
    slots = sorted(rng.sample(range(1, body - 1), 32))
    seq = [bos]
    k = 0
    for i, w in enumerate(hay):
        if k < 32 and i == slots[k]:
            seq += list(needles[k])
            k += 1
        seq.append(w)
    order = list(range(32))
    rng.shuffle(order)
    for f in fmts:
        m = turbokv.Model(path, cache=f, ctx=ctx, threads=2, batch=512)
        m.eval(seq)
        hits, margins = 0, []
        for j in order:
            a, b = needles[j]
            lg = np.asarray(m.eval([a]), dtype=np.float64)
            best_other = np.max(np.delete(lg, b))
            margins.append(lg[b] - best_other)
            hits += int(np.argmax(lg) == b)
            m.eval([b])
        print(f"ctx {ctx} {f}: {100 * hits / 32:.1f}% median margin {statistics.median(margins):.2f} "
              f"min {min(margins):.2f}", flush=True)
