#!/usr/bin/env bash
# Issue 33 "Weights at depth 0": tg32 (1 and 2 threads) and pp512 (2 threads)
# of llama.cpp's llama-bench -fa 1 and turbokv bench, back to back on the same
# ~0.85B gen-model file per weight type (RESULTS §25, §29, §30, §33).
# Usage: scripts/results-weights.sh [BUILD_DIR] [TYPES] [DIR]
#   TYPES: default "Q4_K Q4_0 Q8_0 F16 Q6_K"; DIR keeps the files between runs
#   (default: a temporary folder, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}/turbokv
types=${2:-Q4_K Q4_0 Q8_0 F16 Q6_K}
if [ -n "${3:-}" ]; then dir=$3; mkdir -p "$dir"; else dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT; fi
R=${TKV_RESULTS_REPS:-3}
for T in $types; do
  M=$dir/m-$T.gguf
  [ -s "$M" ] || "$B" gen-model --layers 16 --dim 2048 --heads 32 --kv-heads 8 --head-dim 64 --ffn 5632 \
    --type "$T" -o "$M" >/dev/null
  echo "== $T $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  for t in 2 1; do
    scripts/llama-cpp.sh llama-bench -m "$M" -fa 1 -t $t -p 0 -n 32 -r "$R" 2>&1 | grep -E "tg32" | sed "s/^/llama.cpp t$t /"
    "$B" bench -m "$M" -t $t -p 0 -n 32 -ctk f16 -r "$R" 2>&1 | grep -E "tg32" | sed "s/^/turbokv   t$t /"
  done
  scripts/llama-cpp.sh llama-bench -m "$M" -fa 1 -t 2 -p 512 -n 0 -r 2 2>&1 | grep -E "pp512" | sed "s/^/llama.cpp t2 /"
  "$B" bench -m "$M" -t 2 -p 512 -n 0 -ctk f16 -r 2 2>&1 | grep -E "pp512" | sed "s/^/turbokv   t2 /"
done
