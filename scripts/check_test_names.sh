#!/usr/bin/env bash
# ctest ("test_names"): ctest splits a discovered Catch2 test name at ';',
# and the pieces then match no test and "pass" without running anything.
# Fails, naming them, if a TEST_CASE name holds a ';'.
set -euo pipefail
cd "$(dirname "$0")/.."
if grep -rnE 'TEST_CASE\("[^"]*;' tests; then
  echo "check_test_names: the TEST_CASE names above hold ';' (ctest would split them and run nothing)" >&2
  exit 1
fi
