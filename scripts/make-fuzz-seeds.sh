#!/usr/bin/env bash
# Writes the seed corpora of the fuzz harnesses: fuzz/corpus/cache_file/ (small
# cache files of a tiny random model in each layer state and format family)
# and fuzz/corpus/policy/ (KV policies of the same model).
#   scripts/make-fuzz-seeds.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="${1:-$root/build}/turbokv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out="$root/fuzz/corpus/cache_file"
mkdir -p "$out"
"$bin" gen-model --layers 2 --dim 32 --heads 2 --kv-heads 1 --head-dim 16 --ffn 32 --vocab 300 -o "$tmp/m.gguf" >/dev/null
for i in $(seq 1 30); do echo "the cat sat on the mat and $i dogs ran"; done >"$tmp/doc.txt"
build() { "$bin" cache build -m "$tmp/m.gguf" -f "$tmp/doc.txt" -o "$out/$1.tkvc" "${@:2}" >/dev/null 2>&1; }
build tq4-centred -c 70 -ctk tq4 -ctv tq4
build tq4-staging -c 20 -ctk tq4 -ctv tq4
build f16-plain -c 20 -ctk f16 -ctv f16
build asym -c 70 -ctk q4_0r -ctv tq3.5-ip
build mean-off -c 30 -ctk tq2 -ctv q8_0 --kv-mean-center off
build preset -c 70 --kv-preset compact
pol="$root/fuzz/corpus/policy"
mkdir -p "$pol"
"$bin" calibrate -m "$tmp/m.gguf" -f "$tmp/doc.txt" -c 32 --tokens 128 --bits 4 -o "$pol/bits.tkvp" >/dev/null 2>&1
"$bin" calibrate -m "$tmp/m.gguf" -f "$tmp/doc.txt" -c 32 --tokens 128 --budget 3 --kld-tokens 32 -o "$pol/budget.tkvp" >/dev/null 2>&1
"$bin" calibrate -m "$tmp/m.gguf" -f "$tmp/doc.txt" -c 32 --tokens 128 --bits 4 --protect 2,8,f16 -o "$pol/protect.tkvp" >/dev/null 2>&1
build policy -c 70 --kv-policy "$pol/bits.tkvp"
ls -l "$out" "$pol"
