#!/usr/bin/env bash
# Runs scripts/openai-client-test.mjs (the official `openai` npm package)
# against `turbokv serve --api-key`, started here on a free port and stopped
# with SIGTERM afterwards. The package is installed into TKV_NPM_DIR (default
# /tmp/tkv-npm, outside the repository) when it is not there yet; needs node and npm.
# Usage: scripts/openai-client-test.sh [MODEL]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-../shared/models/ref-5m/ref-5m-f32.gguf}
TKV_BIN=${TKV_BIN:-./build/turbokv}
export TKV_NPM_DIR=${TKV_NPM_DIR:-/tmp/tkv-npm}
# In `make test` (ctest OpenAI.client): without node the test is reported as
# not run, and fails under CI, where the set-up (scripts/install-deps.sh)
# has installed node, npm and the package.
in_ci() { [ -n "${CI:-}" ] && [ "$CI" != 0 ] && [ "$CI" != false ]; }
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if in_ci; then echo "node or npm is missing (apt-get install -y nodejs npm)" >&2; exit 1; fi
  echo "SKIPPED: node or npm is missing (apt-get install -y nodejs npm)"; exit 0
fi
if [ ! -d "$TKV_NPM_DIR/node_modules/openai" ]; then
  mkdir -p "$TKV_NPM_DIR"
  npm install --prefix "$TKV_NPM_DIR" --no-audit --no-fund openai >/dev/null
fi
[ -x "$TKV_BIN" ] || { echo "no $TKV_BIN: build it first" >&2; exit 1; }
[ -f "$MODEL" ] || { if in_ci; then echo "missing $MODEL" >&2; exit 1; fi; echo "SKIPPED: missing $MODEL"; exit 0; }
. scripts/serve-lib.sh
trap cleanup_server EXIT
export TKV_API_KEY=tkv-test-$RANDOM$RANDOM
start_server -m "$MODEL" -np 2 -c 512 --kv-budget 16MiB -t 1 --api-key "$TKV_API_KEY"
export TKV_URL=$URL
rc=0
node scripts/openai-client-test.mjs || rc=1
stop_server || rc=1
exit $rc
