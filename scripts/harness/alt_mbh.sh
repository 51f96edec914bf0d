#!/bin/bash
# Alternates builds of mbh_head.cpp (RESULTS §51): /tmp/${PFX:-mbh}_NAME for each NAME, ROUNDS rounds
# of N tokens, and prints each format's median and minimum ns a row and head, and the median's change
# against the first NAME (the host drifts: compare builds alternated, never runs minutes apart).
# Usage: scripts/harness/alt_mbh.sh ROUNDS N "NAME..." FORMAT...   (T=2 / H=1 pass through to mbh_head)
R=$1; N=$2; BINS=$3; shift 3
out=${TMPDIR:-/tmp}/alt_mbh.out
for r in $(seq $R); do for b in $BINS; do /tmp/${PFX:-mbh}_$b $N "$@" | sed "s/^/$b /"; done; done > "$out"
python3 - "$out" <<'P'
import collections,statistics,sys
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    b,f,v=l.split(); d[(b,f)].append(float(v))
fm=[];bs=[]
for (b,f) in d:
    if f not in fm: fm.append(f)
    if b not in bs: bs.append(b)
for f in fm:
    base=statistics.median(d[(bs[0],f)])
    print(f, '  '.join(f"{b} {statistics.median(d[(b,f)]):.2f} (min {min(d[(b,f)]):.2f}) {100*(statistics.median(d[(b,f)])/base-1):+.1f}%" for b in bs))
P
