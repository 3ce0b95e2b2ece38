#!/usr/bin/env bash
# Configure, build (-j2) and run the unit tests. QAT_SANITIZE=1 builds a separate
# AddressSanitizer + UndefinedBehaviorSanitizer tree (build-asan/) and runs the
# same tests there.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-2}
if [ "${QAT_SANITIZE:-0}" = "1" ]; then
  dir=build-asan
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQAT_SANITIZE=ON -DQAT_NATIVE=ON >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$dir" -j"$jobs"
# Two ctest jobs on two cores: each test runs single-threaded (QAT_TEST_THREADS).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ctest --test-dir "$dir" -j"$jobs" --output-on-failure
