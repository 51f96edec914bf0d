#!/bin/bash
# The GPU checks of the CUDA backend in one run, for a machine with an NVIDIA
# GPU (the lent H200: see docs/RESULTS.md §18 for the call). Builds the
# minimal CUDA configuration (TKV_CUDA_CHECK: util, codec, attention, cuda),
# then runs
#   1. the GPU tests (tests/cuda/cuda_test.cpp, tests/codec/flat_codec_test.cpp): quantize
#      bytes equal to the CPU codec's for every format and d in
#      {64, 80, 96, 128, 256}; attention equal to the float64 reference for
#      format pairs, GQA 1-8, contexts 1 to 64K, decode and prefill, masks,
#      means, pages and per-head bases;
#   2. compute-sanitizer memcheck and racecheck on the kernels (small cases);
#   3. the attention benchmark (bench/gpu/cuda_attn_bench.cpp).
# Everything is written to $OUT (the device tool's folder) or /tmp/cuda-check.
# Packages the machine lacks come from .cuda-deps (scripts/cuda-deps.sh).
set -uo pipefail
OUT=${OUT:-/tmp/cuda-check}
mkdir -p "$OUT"
ROOT=$(pwd)
if [ -d .cuda-deps ]; then
  mkdir -p /tmp/cuda-deps
  for f in .cuda-deps/*.deb; do dpkg -x "$f" /tmp/cuda-deps; done
  export CMAKE_PREFIX_PATH=/tmp/cuda-deps/usr
  export LD_LIBRARY_PATH=/tmp/cuda-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export PATH=/usr/local/cuda/bin:$PATH
{ nvidia-smi -L; nvcc --version | tail -1; g++ --version | head -1; cmake --version | head -1; } 2>&1 | tee "$OUT/device.txt"
step() { echo "== $1 ($(date +%T))"; }
step build
if ! { cmake -S "$ROOT" -B build-cuda -DTKV_CUDA_CHECK=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
       cmake --build build-cuda -j"$(nproc)"; } >"$OUT/build.txt" 2>&1; then
  tail -40 "$OUT/build.txt"
  exit 1
fi
step tests
./build-cuda/tkv_cuda_tests 2>&1 | tee "$OUT/tests.txt" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|OK \]" | tail -40
tests_rc=${PIPESTATUS[0]}
SMALL='Cuda.QuantizeNames*:Cuda.AttentionWithMasks*:Cuda.Unsupported*'
step memcheck
compute-sanitizer --tool memcheck --error-exitcode 9 ./build-cuda/tkv_cuda_tests --gtest_filter="$SMALL" >"$OUT/memcheck.txt" 2>&1
mem_rc=$?
tail -3 "$OUT/memcheck.txt"
step racecheck
compute-sanitizer --tool racecheck --error-exitcode 9 ./build-cuda/tkv_cuda_tests --gtest_filter="$SMALL" >"$OUT/racecheck.txt" 2>&1
race_rc=$?
tail -3 "$OUT/racecheck.txt"
step bench
./build-cuda/tkv_cuda_bench 0.3 2>&1 | tee "$OUT/bench.txt"
step done
# On a machine with a GPU nothing may skip: a skip there means the kernels
# did not run (a driver or build problem), not that they passed.
skipped=0
if nvidia-smi -L >/dev/null 2>&1 && grep -q "^\[  SKIPPED \] Cuda\." "$OUT/tests.txt"; then
  skipped=1
  echo "GPU tests were skipped on a machine with a GPU: see $OUT/tests.txt"
fi
echo "tests rc $tests_rc, skipped on a GPU $skipped, memcheck rc $mem_rc, racecheck rc $race_rc"
[ "$tests_rc" = 0 ] && [ "$skipped" = 0 ] && [ "$mem_rc" = 0 ] && [ "$race_rc" = 0 ]
