#!/usr/bin/env bash
# Installs the Debian 12 packages turbokv needs to build and test (the Python
# ones build and test the turbokv module, gcc builds the C example; hiredis,
# redis-server and haproxy: `serve --kv-store` and its tests, scripts/cluster.sh);
# `install-deps.sh fuzz`: also clang and libFuzzer for `make fuzz`.
# As root: installs what is missing with apt-get. Otherwise: prints the exact
# command and fails, so the build never half-works.
set -euo pipefail
PKGS=(cmake g++ make libhwy-dev libcli11-dev librapidcheck-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev libbenchmark-dev libicu-dev libxxhash-dev
      libcpp-httplib-dev pkg-config gcc binutils libhiredis-dev redis-server haproxy
      python3-dev pybind11-dev python3-numpy python3-pytest nodejs
      python3-torch python3-hypothesis python3-scipy python3-build python3-setuptools python3-wheel python3-pip)
if [ "${1:-}" = fuzz ]; then PKGS+=(clang-14 libfuzzer-14-dev); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's npm only where no npm came with node (NodeSource's nodejs bundles
# its own, and conflicts with Debian's npm package).
command -v npm >/dev/null 2>&1 || missing+=(npm)
# The official `openai` npm package for the OpenAI-client test (ctest
# OpenAI.client, scripts/openai-client-test.sh), outside the repository.
npm_openai() {
  local dir=${TKV_NPM_DIR:-/tmp/tkv-npm}
  [ -d "$dir/node_modules/openai" ] && return 0
  command -v npm >/dev/null || return 0
  mkdir -p "$dir" && npm install --prefix "$dir" --no-audit --no-fund openai >/dev/null 2>&1 ||
    echo "install-deps: npm install openai failed (the OpenAI-client test will try again)" >&2
}
if [ ${#missing[@]} -eq 0 ]; then npm_openai; exit 0; fi
if [ "$(id -u)" -eq 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  echo "install-deps: missing Debian packages. Run:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
npm_openai
