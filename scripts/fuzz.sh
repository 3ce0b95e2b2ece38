#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with Clang (AddressSanitizer +
# UndefinedBehaviorSanitizer) in build-fuzz/ and runs each on its seeds
# (fuzz/seeds/<target>/) and the corpus it grows (build-fuzz/corpus/<target>/):
# FUZZ_RUNS inputs each from a fixed seed (what CI does: the same inputs on
# every machine), or else FUZZ_SECONDS (default 30) each. A crash stops the
# run with the input saved as build-fuzz/crash-*; reproduce with
# ./build-fuzz/fuzz_<target> FILE.
#   FUZZ_SECONDS=3600 bash scripts/fuzz.sh           # longer
#   FUZZ_TARGETS="export" bash scripts/fuzz.sh       # one target
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${FUZZ_RUNS:-}" ]; then budget=(-runs="$FUZZ_RUNS" -seed=1); else budget=(-max_total_time="${FUZZ_SECONDS:-30}"); fi
targets=${FUZZ_TARGETS:-"safetensors image config export calibration"}
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DQAT_FUZZ=ON -DQAT_BUILD_TESTS=OFF >/dev/null
for t in $targets; do cmake --build build-fuzz -j"${JOBS:-2}" --target "fuzz_$t"; done
bash scripts/clean_omp_registrations.sh  # (Clang's OpenMP runtime: the script says why)
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for t in $targets; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "fuzz_$t: ${budget[*]}"
  if ! (cd build-fuzz && "./fuzz_$t" "${budget[@]}" -rss_limit_mb=4096 -timeout=20 \
      -print_final_stats=1 "corpus/$t" "../fuzz/seeds/$t" >"fuzz_$t.log" 2>&1); then
    tail -80 "build-fuzz/fuzz_$t.log"
    echo "fuzz_$t found a failure: build-fuzz/fuzz_$t.log, input saved as build-fuzz/crash-*"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "build-fuzz/fuzz_$t.log" | tail -2
done
