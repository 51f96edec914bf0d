#!/usr/bin/env bash
# RESULTS §42, §43: tq2's pair tables (K: Int8Keys::lut, V: vlut) against the exact path and the byte
# kernels on ref-5m: KL divergence from the f32 cache's distributions (WikiText-2, -c 512, 40 chunks),
# with -b 16 (every attention call has 16 query tokens: the tables score its keys and sum its values)
# and -b 512 (prefill: the byte kernels).
# Usage: scripts/results-lut.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
date -u
. scripts/ref5m-kld-base.sh "$@"
for b in 16 512; do
  sets=("TKV_KEYS=exact" "TKV_KEYS=int8 TKV_INT8_LUT=0 TKV_INT8_VLUT=0")
  [ $b = 16 ] && sets+=("TKV_KEYS=int8 TKV_INT8_LUT=1 TKV_INT8_VLUT=0" "TKV_KEYS=int8 TKV_INT8_LUT=0 TKV_INT8_VLUT=1"
                        "TKV_KEYS=int8 TKV_INT8_LUT=1 TKV_INT8_VLUT=1")
  for set in "${sets[@]}"; do
    out=$(env $set "$B" perplexity -m "$M" -f "$T" -c 512 --chunks 40 -b $b -ctk tq2 -ctv tq2 \
          --kl-divergence-base "$tmp/base" --kl-divergence -t 2 2>&1)
    echo "-b $b $set: KLD $(printf '%s\n' "$out" | grep -m1 '^Mean *KLD:' | awk '{print $3}')" \
         "PPL $(printf '%s\n' "$out" | grep -m1 '^Final estimate: PPL' | awk '{print $5}')"
  done
done
