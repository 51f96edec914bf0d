#!/usr/bin/env bash
# RESULTS §30: decode at depth, turbokv against llama.cpp on the same file
# (issue 33: "tg32 at depth 16K with tq4 >= 4x llama.cpp's best KV type").
#   1. A 62M-parameter F16 llama (8 layers, 8 query / 2 KV heads of 128,
#      32K vocabulary) written by gen-model.
#   2. llama.cpp's llama-bench -fa 1 tg32 at depth 16384 with f16 and q8_0
#      KV, then turbokv bench tg32 at the same depth with tq4, tq3 and f16,
#      back to back, 2 threads.
#   3. bench-attn at 64K (d 128, 8 KV / 32 query heads), 1 and 2 threads.
# Usage: scripts/results-decode-depth.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}/turbokv
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
M=$tmp/m-F16.gguf
"$B" gen-model --layers 8 --dim 512 --heads 8 --kv-heads 2 --head-dim 128 --ffn 1536 --vocab 32000 --ctx 32768 \
  --type F16 -o "$M" >/dev/null
date -u; uptime
# q8_0 KV in llama.cpp's CPU flash attention ran 11.2 tokens/s here against
# 60.5 with f16 (2026-12-02 08:01, its depth fill taking minutes): f16 is its
# best type on this machine; LLAMA_KV="f16 q8_0" measures both again.
for kv in ${LLAMA_KV:-f16}; do
  scripts/llama-cpp.sh llama-bench -m "$M" -fa 1 -t 2 -p 0 -n 32 -d 16384 -ctk $kv -ctv $kv -r 2 2>&1 | grep -E "tg32"
done
"$B" bench -m "$M" -t 2 -p 0 -n 32 -d 16384 -ctk tq4,tq3,f16 -r 2 --depth-fill random 2>&1 | grep -E "tg32"
scripts/llama-cpp.sh llama-bench -m "$M" -fa 1 -t 2 -p 0 -n 32 -d 16384 -ctk f16 -ctv f16 -r 2 2>&1 | grep -E "tg32"
uptime
for t in 1 2; do
  "$B" bench-attn --d 128 --kv-heads 8 --q-heads 32 --ctx 65536 --formats f16,tq4,tq3,tq2 -t $t --min-time 2 2>&1 | tail -4
done
uptime
