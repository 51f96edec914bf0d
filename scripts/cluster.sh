#!/usr/bin/env bash
# A cluster on this machine: redis-server (deploy/redis.conf), N `turbokv
# serve` replicas sharing KV blocks through it (--kv-store), and HAProxy
# (deploy/haproxy.cfg) in front of them, all on free 127.0.0.1 ports with
# their own directory. Runs until SIGINT/SIGTERM, then stops everything
# cleanly (replicas first) and exits 0 when every replica exited 0.
# Usage: scripts/cluster.sh N -m MODEL [turbokv serve flags...]
# Env: TKV_BIN (default build/turbokv); TKV_CLUSTER_DIR (the directory;
# default a new temporary one, removed at the end).
# Prints "cluster: ready URL" once HAProxy answers; DIR/cluster.json holds the
# URLs, the replicas' PIDs and the Redis port.
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-}
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/cluster.sh N -m MODEL [serve flags...]" >&2; exit 2; }
shift
TKV_BIN=${TKV_BIN:-./build/turbokv}
[ -x "$TKV_BIN" ] || { echo "cluster: no $TKV_BIN: build it first" >&2; exit 1; }
for b in redis-server haproxy; do
  command -v $b >/dev/null || { echo "cluster: $b is missing (scripts/install-deps.sh)" >&2; exit 1; }
done
if [ -n "${TKV_CLUSTER_DIR:-}" ]; then DIR=$TKV_CLUSTER_DIR; OWN_DIR=0; mkdir -p "$DIR"
else DIR=$(mktemp -d /tmp/tkv-cluster.XXXXXX); OWN_DIR=1; fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PASS=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
REDIS_PORT=$(free_port)
LB_PORT=$(free_port)
PIDS=() URLS=() REDIS_PID= LB_PID=

stop_all() {
  local rc=0 pid i
  trap '' INT TERM
  [ -n "$LB_PID" ] && kill -TERM "$LB_PID" 2>/dev/null
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then echo "cluster: replica $pid did not stop in 15 s" >&2; kill -KILL "$pid"; rc=1; fi
    wait "$pid" || { echo "cluster: replica $pid exited $?" >&2; rc=1; }
  done
  [ -n "$LB_PID" ] && wait "$LB_PID" 2>/dev/null
  if [ -n "$REDIS_PID" ]; then kill -TERM "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null; fi
  [ "$OWN_DIR" = 1 ] && rm -rf "$DIR"
  echo "cluster: stopped"
  exit $rc
}
trap stop_all INT TERM

redis-server deploy/redis.conf --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$DIR" --requirepass "$PASS" \
  --maxmemory 1gb --daemonize no >"$DIR/redis.log" 2>&1 &
REDIS_PID=$!
STORE="redis://:$PASS@127.0.0.1:$REDIS_PORT"
for i in $(seq 1 "$N"); do
  # The URL (and its password) through the environment, not the process list.
  TURBOKV_KV_STORE=$STORE "$TKV_BIN" serve --port 0 "$@" >"$DIR/replica$i.log" 2>&1 &
  PIDS+=($!)
done
for i in $(seq 1 "$N"); do
  port=
  for t in $(seq 1 600); do
    port=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$DIR/replica$i.log")
    [ -n "$port" ] && break
    kill -0 "${PIDS[$((i - 1))]}" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "cluster: replica $i did not start:" >&2; tail -5 "$DIR/replica$i.log" >&2; stop_all; }
  URLS+=("http://127.0.0.1:$port")
done
{
  sed -e "s|^\(\s*bind\s\+\).*|\1127.0.0.1:$LB_PORT|" -e '/^\s*server /d' deploy/haproxy.cfg
  for i in $(seq 1 "$N"); do echo "    server replica$i ${URLS[$((i - 1))]#http://} check inter 1s"; done
} >"$DIR/haproxy.cfg"
haproxy -db -f "$DIR/haproxy.cfg" >"$DIR/haproxy.log" 2>&1 &
LB_PID=$!
URL="http://127.0.0.1:$LB_PORT"
for t in $(seq 1 100); do curl -fsS "$URL/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "$URL/health" >/dev/null 2>&1 || { echo "cluster: haproxy does not answer:" >&2; cat "$DIR/haproxy.log" >&2; stop_all; }
python3 - "$DIR/cluster.json" "$URL" "$REDIS_PORT" "${URLS[*]}" "${PIDS[*]}" <<'PY'
import json, sys
path, url, redis, urls, pids = sys.argv[1:6]
json.dump({"url": url, "redis_port": int(redis), "replicas": urls.split(), "pids": [int(p) for p in pids.split()]},
          open(path, "w"))
PY
echo "cluster: replicas ${URLS[*]}; redis 127.0.0.1:$REDIS_PORT (password in $DIR/cluster.env); logs in $DIR"
echo "STORE=$STORE" >"$DIR/cluster.env"; chmod 600 "$DIR/cluster.env"
echo "cluster: ready $URL"
while :; do sleep 1 & wait $!; done
