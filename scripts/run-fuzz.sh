#!/usr/bin/env bash
# Runs every fuzz harness of a TKV_FUZZ build for N seconds each, starting
# from its seed corpus fuzz/corpus/NAME/ (copied: the repository's seeds are
# not modified; new inputs stay under BUILD/corpus/NAME). Fails on any crash,
# sanitizer report, leak, per-input timeout (10 s) or RSS over 2 GiB; the
# input that did it is left in BUILD/artifacts/.
#   scripts/run-fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=${1:?build dir}
seconds=${2:?seconds}
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
mkdir -p "$build/artifacts"
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  seeds="$root/fuzz/corpus/${name#fuzz_}"
  work="$build/corpus/${name#fuzz_}"
  mkdir -p "$work"
  log="$build/$name.log"
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$build/artifacts/$name-" "$work" "$seeds" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
    echo "fuzz: $name: ${seconds}s, $runs inputs, $cov edges covered, no findings"
  else
    echo "fuzz: $name FAILED (log: $log)"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -20 || true
    status=1
  fi
done
exit $status
