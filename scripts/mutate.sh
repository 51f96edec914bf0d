#!/usr/bin/env bash
# Mutation testing: applies each one-line mutation of scripts/mutations.txt
# (FILE @@ TEXT @@ REPLACEMENT @@ TEST FILTER) alone, rebuilds the Release test
# binary, runs the named tests and reports the mutations that survived (the
# tests passed although the code was broken). The source is restored after
# each one, whatever happens. Usage: scripts/mutate.sh [BUILD_DIR] [LIST]
# A filter `pytest:TESTS` runs those Python tests on the module instead
# (scripts/mutations-python.txt); `ctest:REGEX` rebuilds only the binary and
# runs those ctest tests (tests/kvstore).
# Exit status: 0 when every mutation was caught, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
list=${2:-scripts/mutations.txt}
[ -d "$build" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
survivors=0; caught=0; n=0
while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  n=$((n + 1))
  file=${line%% @@ *}; rest=${line#* @@ }
  text=${rest%% @@ *}; rest=${rest#* @@ }
  repl=${rest%% @@ *}; filter=${rest#* @@ }
  trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
  file=$(trim "$file"); text=$(trim "$text"); repl=$(trim "$repl"); filter=$(trim "$filter")
  cp "$file" "$file.mutate-orig"
  if ! python3 - "$file" "$text" "$repl" <<'PY'
import sys
p, a, b = sys.argv[1:4]
a, b = a.replace("\\n", "\n"), b.replace("\\n", "\n")  # "\n" in the list: a line break
s = open(p).read()
if s.count(a) != 1:
    sys.exit(f"mutation {a!r}: found {s.count(a)} times in {p}, expected once")
open(p, "w").write(s.replace(a, b))
PY
  then
    echo "mutate: #$n not applied (the text moved?): $file"; survivors=$((survivors + 1))
    mv "$file.mutate-orig" "$file"; continue
  fi
  if [ "${filter#pytest:}" != "$filter" ]; then
    # A Python test (tests/python): the module and the binary it compares with.
    if ! cmake --build "$build" -j"$(nproc)" --target turbokv turbokv_py >/tmp/mutate-build.log 2>&1; then
      echo "mutate: #$n caught by the compiler: $file: $text"; caught=$((caught + 1))
    elif PYTHONPATH="$build/python" TKV_BINARY="$build/turbokv" TKV_SHARED_DIR="$PWD/../shared" TKV_SOURCE_DIR="$PWD" \
         TKV_BUILD_DIR="$(cd "$build" && pwd)" /usr/bin/python3 -m pytest -q -x -p no:cacheprovider ${filter#pytest:} \
         >/tmp/mutate-test.log 2>&1; then
      echo "mutate: #$n SURVIVED (${filter#pytest:} passed): $file: '$text' -> '$repl'"; survivors=$((survivors + 1))
    else
      echo "mutate: #$n caught by ${filter#pytest:}"; caught=$((caught + 1))
    fi
  elif [ "${filter#ctest:}" != "$filter" ]; then
    # A ctest test that runs the binary (tests/kvstore): only turbokv is rebuilt.
    if ! cmake --build "$build" -j"$(nproc)" --target turbokv >/tmp/mutate-build.log 2>&1; then
      echo "mutate: #$n caught by the compiler: $file: $text"; caught=$((caught + 1))
    elif ctest --test-dir "$build" -R "${filter#ctest:}" >/tmp/mutate-test.log 2>&1; then
      echo "mutate: #$n SURVIVED (${filter#ctest:} passed): $file: '$text' -> '$repl'"; survivors=$((survivors + 1))
    else
      echo "mutate: #$n caught by ${filter#ctest:}"; caught=$((caught + 1))
    fi
  elif ! cmake --build "$build" -j"$(nproc)" --target turbokv tkv_tests >/tmp/mutate-build.log 2>&1; then
    echo "mutate: #$n caught by the compiler: $file: $text"; caught=$((caught + 1))
  elif "$build/tkv_tests" --gtest_filter="$filter" >/tmp/mutate-test.log 2>&1; then
    echo "mutate: #$n SURVIVED ($filter passed): $file: '$text' -> '$repl'"; survivors=$((survivors + 1))
  else
    echo "mutate: #$n caught by $filter"; caught=$((caught + 1))
  fi
  mv "$file.mutate-orig" "$file"
  touch "$file"
done < "$list"
if grep -q '@@ *ctest:' "$list" && ! grep -qv -e '@@ *ctest:' -e '^#' -e '^$' "$list"; then cmake --build "$build" -j"$(nproc)" --target turbokv >/dev/null 2>&1
elif grep -q '@@ *pytest:' "$list"; then cmake --build "$build" -j"$(nproc)" --target turbokv turbokv_py >/dev/null 2>&1
else cmake --build "$build" -j"$(nproc)" --target turbokv tkv_tests >/dev/null 2>&1; fi
echo "mutate: $caught caught, $survivors survived, of $n"
[ "$survivors" -eq 0 ]
