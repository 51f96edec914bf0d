#!/usr/bin/env bash
# RESULTS §27: int8 attention on codes (issue 33) against the f32 path.
#   1. Quality: ref-5m KL divergence from its f32-cache distributions, per
#      format, with TKV_KEYS=exact and TKV_KEYS=int8 (WikiText-2, -c 512,
#      40 chunks).
#   2. Speed: bench-attn at 64K (d 128, 8 KV / 32 query heads, 2 threads),
#      exact and int8, each format beside f16 in the same run.
# Usage: scripts/results-int8-attention.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
date -u; uptime
. scripts/ref5m-kld-base.sh "$@"
printf '%-8s %-6s %12s %12s\n' format keys "mean KLD" PPL
for f in tq2 tq2.5 tq3 tq3.5 tq4 tq4.5; do
  for k in exact int8; do
    out=$(TKV_KEYS=$k "$B" perplexity -m "$M" -f "$T" -c 512 --chunks 40 -ctk "$f" -ctv "$f" \
          --kl-divergence-base "$tmp/base" --kl-divergence -t 2 2>&1)
    kld=$(printf '%s\n' "$out" | grep -m1 "^Mean *KLD:" | awk '{print $3}')
    ppl=$(printf '%s\n' "$out" | grep -m1 "^Final estimate: PPL" | awk '{print $5}')
    printf '%-8s %-6s %12s %12s\n' "$f" "$k" "${kld:-?}" "${ppl:-?}"
  done
done
[ "${TKV_RESULTS_SKIP_BENCH:-}" = 1 ] && exit 0
for k in exact int8; do
  echo "bench-attn, TKV_KEYS=$k:"
  TKV_KEYS=$k "$B" bench-attn --d 128 --kv-heads 8 --q-heads 32 --ctx 65536 --formats f16,tq4,tq3,tq2 -t 2 -r 9 --no-progress 2>&1 | tail -5
done
uptime
