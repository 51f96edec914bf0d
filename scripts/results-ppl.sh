#!/usr/bin/env bash
# Reproduces docs/RESULTS.md section 6: PPL and KLD of every cache format on
# the reference model (first 40 chunks of WikiText-2 test), as JSON lines.
# Usage: scripts/results-ppl.sh [OUT.jsonl] [CHUNKS]
set -euo pipefail
cd "$(dirname "$0")/.."
M=../shared/models/ref-5m/ref-5m-f32.gguf
T=../shared/data/text/wikitext-2-raw-test.txt
J=${1:-/tmp/turbokv-ppl.jsonl}
N=${2:-40}
B=$(mktemp /tmp/turbokv-base.XXXXXX.kl)
rm -f "$J"
./build/turbokv perplexity -m $M -f $T --normalize-newlines --chunks $N -ctk f32 -ctv f32 --kl-divergence-base "$B" --json-out "$J" >/dev/null
run() { ./build/turbokv perplexity -m $M -f $T --normalize-newlines --chunks $N --kl-divergence-base "$B" --kl-divergence --json-out "$J" "$@" >/dev/null; }
for f in f16 q8_0 q4_0 q4_0r tq4 tq4.5 tq3.5 tq3 tq2.5 tq2; do run -ctk $f -ctv $f; done
for f in tq4 tq4.5 tq3.5 tq3 tq2.5 tq2; do run -ctk $f -ctv $f --kv-mean-center off; done
run -ctk f16 -ctv tq3
run -ctk q8_0 -ctv tq4
run -ctk tq4-ip -ctv tq4-ip
run -ctk tq3-ip -ctv tq3-ip
rm -f "$B"
echo "wrote $J"
