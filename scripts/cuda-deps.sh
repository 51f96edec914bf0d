#!/bin/bash
# Fetches (here, on the Debian 12 development machine) the packages the GPU
# machine's minimal build needs and does not have: Highway and GoogleTest.
# They go to .cuda-deps/ (ignored by git), which the device run carries:
#   scripts/cuda-deps.sh, then run scripts/cuda-check.sh with carry .cuda-deps
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cuda-deps
cd .cuda-deps
apt-get download libhwy-dev libhwy1 libgtest-dev >/dev/null
ls -la
