#!/usr/bin/env bash
# Load test of `turbokv serve`: starts the server on a free port, runs
# `turbokv loadgen` (CLIENTS threads x REQUESTS requests, every response
# checked), reads the server's peak RSS, checks that /metrics is back to rest
# (no request running, every KV block back in the pool: without
# --slot-save-path idle slots keep nothing), then stops the server with SIGTERM
# and checks that it exits 0 within 10 s. Exits non-zero on any failure.
# Usage: scripts/load-test.sh [MODEL] [CLIENTS] [REQUESTS]
#   env: TKV_ATTACK=1: scripts/attacker.py runs beside loadgen (slow clients,
#        oversized chunked bodies, header floods; --timeout 5 --max-body 1MiB
#        added to the server flags): loadgen must still see 0 errors and every
#        flood must be refused with a 4xx;
#        TKV_SERVE_ARGS (default "-np 4 -c 1024 --kv-budget 64MiB -t 1"),
#        TKV_LOADGEN_ARGS (extra loadgen flags, e.g. "--max-tokens 32"), TKV_PORTS (18100-18199)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-../shared/models/ref-5m/ref-5m-f32.gguf}
CLIENTS=${2:-64}
REQUESTS=${3:-100}
TKV_BIN=${TKV_BIN:-./build/turbokv}
SERVE_ARGS=${TKV_SERVE_ARGS:--np 4 -c 1024 --kv-budget 64MiB -t 1}
[ -x "$TKV_BIN" ] || { echo "no $TKV_BIN: build it first (cmake --build build --target turbokv)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no model $MODEL" >&2; exit 1; }
. scripts/serve-lib.sh
trap cleanup_server EXIT

# Every client may wait for a slot: the queue must hold them all (else 503).
# shellcheck disable=SC2086
ATTACK_ARGS=()
[ "${TKV_ATTACK:-0}" = 1 ] && ATTACK_ARGS=(--timeout 5 --max-body 1MiB)
start_server -m "$MODEL" $SERVE_ARGS --queue $((CLIENTS + 16)) "${ATTACK_ARGS[@]}"
echo "load-test: turbokv serve (pid $SERVER_PID) on $URL: $SERVE_ARGS"
fail=0
ATTACKER_PID=
if [ "${TKV_ATTACK:-0}" = 1 ]; then
  python3 scripts/attacker.py "$PORT" 3600 &
  ATTACKER_PID=$!
  echo "load-test: attacker (pid $ATTACKER_PID) beside loadgen"
fi
OUT=$(mktemp /tmp/turbokv-loadgen.XXXXXX.txt)
# shellcheck disable=SC2086
"$TKV_BIN" loadgen --url "$URL" --clients "$CLIENTS" --requests "$REQUESTS" ${TKV_LOADGEN_ARGS:-} 2>&1 | tee "$OUT" ||
  { echo "FAIL: loadgen reported errors"; fail=1; }
RSS_KB=$(awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status")
if [ -n "$ATTACKER_PID" ]; then
  kill -TERM "$ATTACKER_PID"
  wait "$ATTACKER_PID" || { echo "FAIL: a flood was not refused with a 4xx"; fail=1; }
fi

metric() { awk -v m="$1" '$1 == m {print $2}' <<<"$METRICS"; }
# The gauges are sampled after the last response was read: the engine may
# still be releasing the last sequence for a moment, so wait up to 2 s.
for i in $(seq 1 20); do
  METRICS=$(curl -fsS "$URL/metrics")
  RUNNING=$(metric turbokv_requests_running); USED=$(metric turbokv_kv_blocks_used)
  [ "$RUNNING" = 0 ] && [ "$USED" = 0 ] && break
  sleep 0.1
done
if [ "$i" -gt 1 ]; then echo "note: /metrics reached rest after $i samples"; fi
if [ "$RUNNING" != 0 ]; then echo "FAIL: turbokv_requests_running is $RUNNING after the load, not 0"; fail=1; fi
if [ "$USED" != 0 ]; then echo "FAIL: turbokv_kv_blocks_used is $USED after the load, not 0"; fail=1; fi
echo "metrics: requests_total $(metric turbokv_requests_total), rejected $(metric turbokv_requests_rejected_total)," \
  "tokens_generated $(metric turbokv_tokens_generated_total), kv_blocks_total $(metric turbokv_kv_blocks_total)," \
  "kv_blocks_cached $(metric turbokv_kv_blocks_cached), requests_running $RUNNING, kv_blocks_used $USED"

stop_server || fail=1
SUMMARY=$(grep -E '^requests:' "$OUT" || echo "requests: ? (loadgen printed no summary)")
rm -f "$OUT"
printf 'load-test: %s: %s x %s on %s; %s; peak RSS %.1f MiB; %s\n' "$([ $fail = 0 ] && echo OK || echo FAILED)" \
  "$CLIENTS" "$REQUESTS" "$(basename "$MODEL")" "$SUMMARY" "$(awk -v k="$RSS_KB" 'BEGIN {print k / 1024}')" \
  "$([ $fail = 0 ] && echo 'metrics at rest, clean exit on SIGTERM' || echo 'see above')"
exit $fail
