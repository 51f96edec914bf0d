#!/usr/bin/env bash
# A/B of environment settings at 64K (RESULTS §35): separate processes alternated, each
# `bench-attn -r ROUNDS`; prints each run's median ratios to f16. Usage:
#   scripts/harness/rab.sh ROUNDS RUNS "ENV_A" "ENV_B" ...   (e.g. "X=1" "TKV_KEYS=exact")
# TKV_BIN=PATH in a setting runs that binary (two builds against each other).
B=${TKV_BUILD:-build}/turbokv
R=$1; N=$2; shift 2
for n in $(seq $N); do
  for v in "$@"; do
    bin=$B
    for kv in $v; do case $kv in TKV_BIN=*) bin=${kv#TKV_BIN=} ;; esac; done
    echo "[$v] $(env $v "$bin" bench-attn --d 128 --kv-heads 8 --q-heads 32 --ctx 65536 --formats f16,tq4,tq3,tq2 --min-time 0.5 -t 2 -r $R --no-progress 2>&1 | awk '$4=="decode" && $1!="f16"{printf "%s %s  ", $1, $11}')"
  done
done
