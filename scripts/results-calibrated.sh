#!/bin/sh
# Calibrated policies on ref-5m (docs/RESULTS.md §8): calibrate on the NIAH
# essays, measure KLD on WikiText-2 test (-c 512, first 40 chunks) against an
# f32-cache base, next to plain tq and q4_0 at equal bits.
# Usage: scripts/results-calibrated.sh OUTDIR
set -eu
OUT=${1:?usage: $0 OUTDIR}
mkdir -p "$OUT"
BIN=./build/turbokv
SHARED=${TKV_SHARED:-../shared}
M=$SHARED/models/ref-5m/ref-5m-f32.gguf
T=$SHARED/data/text/wikitext-2-raw-test.txt
N=$SHARED/data/niah/paul-graham-essays
PPL="$BIN perplexity -m $M -f $T --normalize-newlines -c 512 --chunks 40"
$PPL -ctk f32 --cache-type-v f32 --kl-divergence-base "$OUT/base.kl" > /dev/null 2>&1
kld() { $PPL "$@" --kl-divergence-base "$OUT/base.kl" --kl-divergence 2>/dev/null | awk '/Mean    KLD/ {print $3}'; }
echo "| bits/value | plain | plain KLD | calibrated policy KLD | plain / calibrated |"
echo "| ---: | --- | ---: | ---: | ---: |"
for pair in 2.5:tq2.5 3.25:tq3 3.5:tq3.5 4.25:tq4 4.5:tq4.5; do
  b=${pair%%:*}; f=${pair#*:}
  $BIN calibrate -m $M -f $N --budget "$b" -o "$OUT/budget-$b.tkvp" > "$OUT/budget-$b.txt" 2>/dev/null
  kp=$(kld -ctk "$f" --cache-type-v "$f")
  kc=$(kld --kv-policy "$OUT/budget-$b.tkvp")
  echo "| $b | $f | $kp | $kc | $(echo "$kp $kc" | awk '{printf "%.2f", $1 / $2}') |"
done
$BIN calibrate -m $M -f $N --bits 4.25 -o "$OUT/uniform-4.25.tkvp" > "$OUT/uniform-4.25.txt" 2>/dev/null
echo
echo "uniform tqc4 (4.25 bits, no budget): KLD $(kld --kv-policy "$OUT/uniform-4.25.tkvp")"
echo "q4_0 (4.5 bits): KLD $(kld -ctk q4_0 --cache-type-v q4_0)"
echo "q4_0r (4.5 bits): KLD $(kld -ctk q4_0r --cache-type-v q4_0r)"
for p in quality balanced compact; do
  echo "preset $p: $($PPL --kv-preset $p --kl-divergence-base "$OUT/base.kl" --kl-divergence 2>&1 | awk '/bits\/value/ {sub(/.*\(/, ""); sub(/\).*/, ""); printf "%s, ", $0} /Mean    KLD/ {print "KLD " $3}')"
done
