# Sourced by scripts/load-test.sh and scripts/openai-client-test.sh: starts
# `turbokv serve` on a free port and stops it. Needs TKV_BIN (the binary).
#   start_server ARGS...   sets SERVER_PID, PORT, URL, SERVER_LOG; returns once /health answers
#   stop_server            SIGTERM; fails unless the server exits 0 within 10 s
# Ports are tried in TKV_PORTS (default 18100..18199, shuffled): a port in use
# makes the server exit at once, and the next one is tried.
SERVER_PID=
SERVER_LOG=$(mktemp /tmp/turbokv-serve.XXXXXX.log)

start_server() {
  local lo=${TKV_PORTS%-*} hi=${TKV_PORTS#*-} port i
  for port in $(shuf -i "$lo-$hi"); do
    "$TKV_BIN" serve --port "$port" "$@" >"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    for i in $(seq 1 600); do  # 60 s for the model to load
      if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
      # Our server has bound the port once it says so (another one may answer there before).
      if grep -q "^listening on" "$SERVER_LOG" && curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
        PORT=$port
        URL=http://127.0.0.1:$port
        return 0
      fi
      sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "turbokv serve did not answer /health within 60 s:" >&2
      cat "$SERVER_LOG" >&2
      kill -KILL "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=
      return 1
    fi
    wait "$SERVER_PID" 2>/dev/null; SERVER_PID=
    grep -q "cannot listen" "$SERVER_LOG" || { echo "turbokv serve failed:" >&2; cat "$SERVER_LOG" >&2; return 1; }
  done
  echo "no free port in $TKV_PORTS" >&2
  return 1
}

stop_server() {
  local pid=$SERVER_PID i rc
  SERVER_PID=
  kill -TERM "$pid"
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: turbokv serve still running 10 s after SIGTERM" >&2
    kill -KILL "$pid"; wait "$pid" 2>/dev/null
    return 1
  fi
  rc=0; wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: turbokv serve exited $rc after SIGTERM; its log:" >&2
    tail -20 "$SERVER_LOG" >&2
    return 1
  fi
}

cleanup_server() {
  if [ -n "$SERVER_PID" ]; then kill -KILL "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
  rm -f "$SERVER_LOG"
}

TKV_PORTS=${TKV_PORTS:-18100-18199}
