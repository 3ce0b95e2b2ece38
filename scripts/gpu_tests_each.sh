#!/usr/bin/env bash
# Runs each GPU test (Catch2 tag [cuda]) in a process of its own and prints
# one line per test: PASS/FAIL, its seconds, and for a failure the first
# lines that say why. For when scripts/gpu_check.sh's single run of every
# test broke off (a crash) or one kernel fault failed every test after it (a
# CUDA error such as an illegal address stays with the process's context);
# gpu_check.sh runs it then, with the library path it set.
#   bash scripts/gpu_tests_each.sh BIN_DIR [SECONDS_IN_ALL]     (default 150)
set -uo pipefail
bin=${1:?the folder holding qat_tests}
budget=${2:-150}
start=$(date +%s)
export QAT_REQUIRE_GPU=1
# Catch2 reads ',' '[' ']' '\' in a test spec as syntax: escape them.
escape() { sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' -e 's/\[/\\[/g' -e 's/\]/\\]/g'; }
passed=0 failed=0 left=0
while IFS= read -r name; do
  now=$(date +%s)
  if [ $((now - start)) -ge "$budget" ]; then left=$((left + 1)); continue; fi
  spec=$(printf '%s' "$name" | escape)
  t0=$(date +%s.%N)
  out=$(timeout 60 "$bin/qat_tests" "$spec" 2>&1)
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  if [ $rc -eq 0 ] && echo "$out" | grep -q "^All tests passed"; then
    passed=$((passed + 1)); printf 'PASS %6.1f s  %s\n' "$secs" "$name"
  else
    failed=$((failed + 1)); printf 'FAIL %6.1f s  %s (exit %d)\n' "$secs" "$name" "$rc"
    echo "$out" | grep -E -A3 "FAILED|with message|due to|error|Error" | head -12 | sed 's/^/      /'
  fi
done < <("$bin/qat_tests" "[cuda]" --list-test-names-only | grep .)
echo "gpu_tests_each: $passed passed, $failed failed, $left not run (time), $(( $(date +%s) - start )) s"
