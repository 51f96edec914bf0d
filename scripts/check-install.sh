#!/usr/bin/env bash
# Installs a build into a fresh prefix (what `make install PREFIX=...` does),
# then compiles examples/c/tkv_example.c with -std=c99 -Wall -Werror against
# the installed header, library and pkg-config file alone, and runs it.
#   scripts/check-install.sh BUILD_DIR PREFIX [MODEL.gguf] [EXTRA_CFLAGS]
set -euo pipefail
build=$1 prefix=$2 model=${3:-} extra=${4:-}
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/turbokv.h lib/libturbokv.so lib/pkgconfig/turbokv.pc; do
  [ -e "$prefix/$f" ] || { echo "check-install: $prefix/$f was not installed" >&2; exit 1; }
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs turbokv)
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -Werror -pedantic $extra "$src/examples/c/tkv_example.c" $flags \
   -Wl,-rpath,"$prefix/lib" -o "$prefix/tkv_example"
"$prefix/tkv_example" ${model:+"$model"}
# The installed Python module finds the installed library by itself (rpath).
for d in "$prefix"/lib/python3*/dist-packages; do
  [ -d "$d" ] || continue
  env -u LD_LIBRARY_PATH PYTHONPATH="$d" /usr/bin/python3 -c \
    'import turbokv; print("python module", turbokv.__version__, "from", turbokv.__file__)'
done
