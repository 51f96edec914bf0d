#!/usr/bin/env bash
# Runs one of llama.cpp's tools from ../shared/tools/llama.cpp/bin, e.g.
#   scripts/llama-cpp.sh llama-bench -m FILE -fa 1 -t 2 -p 512 -n 32
# The shared folder stores each library's versioned symlinks
# (libggml.so.0 -> libggml.so.0.10.0) as text files naming their target, so the
# loader cannot follow them; this makes a folder of real links once and runs
# the tool with it on LD_LIBRARY_PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TKV_LLAMA_CPP:-${TKV_SHARED:-$here/../shared}/tools/llama.cpp/bin}
[ -x "$bin/${1:-llama-bench}" ] || { echo "llama-cpp.sh: no $bin/${1:-?}" >&2; exit 1; }
libs=${TMPDIR:-/tmp}/tkv-llama-libs-$(id -u)
mkdir -p "$libs"
for f in "$bin"/lib*.so*; do
  name=$(basename "$f")
  if [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 256 ] && ! head -c 4 "$f" | grep -q ELF; then
    ln -sf "$bin/$(cat "$f")" "$libs/$name"      # a stored symlink: its text is the target
  else
    ln -sf "$f" "$libs/$name"
  fi
done
tool=$1; shift
LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$bin/$tool" "$@"
