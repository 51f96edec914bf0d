#!/usr/bin/env bash
# Old (row-streaming) and new matrix-multiply cores back to back on ~1 GB
# random llama models of each weight type: `turbokv bench -p 512 -n N` with
# `--matmul old,new`, so each pair ran in one process minutes apart. Writes
# the markdown rows to stdout, the load average before each model to stderr.
#
#   scripts/bench-matmul.sh [THREADS] [TYPES...]      (default: 2, every type)
#
# Models are made in $TKV_BENCH_DIR (default /tmp) when missing, with the
# layer counts that make each about 1 GB (dim 2048, 16/4 heads of 128, ffn
# 5632, vocabulary 32000). Decode of the K-quants on the old core runs at
# 0.6-2.3 tokens/s, so they decode 32 tokens, not 128.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
shift || true
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(F16 BF16 Q8_0 Q4_0 Q4_K Q6_K)
dir=${TKV_BENCH_DIR:-/tmp}
bin=./build/turbokv
for t in "${types[@]}"; do
  case $t in
    F16|BF16) layers=9 ;;
    Q8_0) layers=19 ;;
    Q4_0|Q4_K) layers=39 ;;
    Q6_K) layers=26 ;;
    *) echo "unknown type $t" >&2; exit 2 ;;
  esac
  case $t in Q4_K|Q6_K) n=32 ;; *) n=128 ;; esac
  model=$dir/wtm-$t.gguf
  [ -f "$model" ] || $bin gen-model --arch llama --layers $layers --dim 2048 --heads 16 --kv-heads 4 --head-dim 128 \
    --ffn 5632 --vocab 32000 --type "$t" -o "$model" >&2
  echo "# $t, $threads threads, $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  $bin bench -m "$model" -p 512 -n $n -t "$threads" -r 1 -ctk f16 --matmul old,new -o md --no-progress | grep '^| llama'
done
