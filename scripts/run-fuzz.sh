#!/usr/bin/env bash
# Runs every fuzz harness of a TKV_FUZZ build for N seconds each, starting
# from its seed corpus fuzz/corpus/NAME/ (copied: the repository's seeds are
# not modified; new inputs stay under BUILD/corpus/NAME). Fails on any crash,
# sanitizer report, leak, per-input timeout (10 s) or RSS over 2 GiB; the
# input that did it is left in BUILD/artifacts/. With RUNS, a harness also
# stops after that many inputs (the dedicated run: 600 s or 1M, whichever
# comes first). FUZZ_JOBS harnesses run at once (default: the cores).
#   scripts/run-fuzz.sh BUILD_DIR SECONDS [RUNS]
set -euo pipefail
build=${1:?build dir}
seconds=${2:?seconds}
runs=${3:-0}
jobs=${FUZZ_JOBS:-$(nproc)}
runs_flag=()
[ "$runs" -gt 0 ] && runs_flag=(-runs="$runs")
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/artifacts"

# One harness; its verdict goes to BUILD/NAME.result (printed in order below).
fuzz_one() {
  local bin=$1 name seeds work log start
  name=$(basename "$bin")
  seeds="$root/fuzz/corpus/${name#fuzz_}"
  work="$build/corpus/${name#fuzz_}"
  mkdir -p "$work"
  log="$build/$name.log"
  start=$(date +%s)
  if "$bin" -max_total_time="$seconds" "${runs_flag[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$build/artifacts/$name-" "$work" "$seeds" >"$log" 2>&1; then
    local done_runs rate cov
    done_runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
    echo "fuzz: $name: $(( $(date +%s) - start ))s, $done_runs inputs ($rate/s), $cov edges covered, no findings" \
      >"$build/$name.result"
  else
    { echo "fuzz: $name FAILED (log: $log)"
      grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -20 || true; } >"$build/$name.result"
    return 1
  fi
}

bins=()
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] && [ -f "$bin" ] && bins+=("$bin")
done
[ ${#bins[@]} -gt 0 ] || { echo "fuzz: no harness in $build"; exit 1; }
status=0
running=0
for bin in "${bins[@]}"; do
  rm -f "$build/$(basename "$bin").result"
  fuzz_one "$bin" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
for bin in "${bins[@]}"; do
  cat "$build/$(basename "$bin").result" 2>/dev/null || { echo "fuzz: $(basename "$bin"): no result"; status=1; }
done
exit $status
