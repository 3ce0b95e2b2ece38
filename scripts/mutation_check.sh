#!/usr/bin/env bash
# On demand, not in CI (it rebuilds once per entry): makes each edit of
# scripts/mutations.txt (or the file given) in turn, rebuilds build/
# incrementally (the qat binary too: e2e tests run it), runs the tests the entry names, puts the file back, and
# prints whether the tests caught the edit. Exits non-zero when any edit
# was let through or any entry's code is no longer there to find.
#   bash scripts/mutation_check.sh [entries-file]
set -uo pipefail
cd "$(dirname "$0")/.."
entries=${1:-scripts/mutations.txt}
[ -x build/qat_tests ] || { echo "mutation_check: build first (bash scripts/test.sh)"; exit 2; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
backup=$(mktemp) current=""
restore() { [ -n "$current" ] && cp "$backup" "$current"; current=""; }
trap 'restore; rm -f "$backup"' EXIT
trap 'exit 130' INT TERM
caught=0 through=0 stale=0
build() { cmake --build build -j"${JOBS:-2}" --target qat qat_tests > /tmp/mutation_build.log 2>&1; }
# One entry: file, find, replace, tests.
check() {
  local file=$1 find=$2 replace=$3 tests=$4
  if ! grep -qF -- "$find" "$file"; then
    echo "STALE    $file: '$find' is not there (update the entry)"; stale=$((stale + 1)); return
  fi
  cp "$file" "$backup"; current=$file
  FIND=$find REPLACE=$replace python3 - "$file" <<'PY'
import os, sys
p = sys.argv[1]
s = open(p).read()
open(p, "w").write(s.replace(os.environ["FIND"], os.environ["REPLACE"], 1))
PY
  if ! build; then
    echo "CAUGHT   $file: '$find' -> '$replace' (does not compile)"; caught=$((caught + 1))
  elif build/qat_tests "$tests" > /tmp/mutation_tests.log 2>&1; then
    echo "THROUGH  $file: '$find' -> '$replace': [$tests] still pass"; through=$((through + 1))
  else
    echo "CAUGHT   $file: '$find' -> '$replace' by [$tests]"; caught=$((caught + 1))
  fi
  restore
}
file="" find="" replace="" tests=""
while IFS= read -r line || [ -n "$line" ]; do
  case $line in
    "#"*) continue ;;
    file:*) file=${line#file: } ;;
    find:*) find=${line#find: } ;;
    replace:*) replace=${line#replace: } ;;
    tests:*) tests=${line#tests: } ;;
    "")
      [ -n "$file" ] && check "$file" "$find" "$replace" "$tests"
      file="" find="" replace="" tests="" ;;
  esac
done < "$entries"
[ -n "$file" ] && check "$file" "$find" "$replace" "$tests"
build || echo "mutation_check: the unchanged tree no longer builds (see /tmp/mutation_build.log)"
echo "$caught caught, $through let through, $stale stale"
[ "$through" = 0 ] && [ "$stale" = 0 ]
