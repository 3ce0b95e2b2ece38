#!/usr/bin/env bash
# Install what is missing, configure, build (-j2) and run the unit tests. QAT_SANITIZE=1 builds a separate
# AddressSanitizer + UndefinedBehaviorSanitizer tree (build-asan/) and runs the
# same tests there. QAT_PORTABLE=1 builds a tree for any x86-64 CPU
# (build-portable/: no -march=native, no CUDA) and runs them there: the
# kernels chosen at run time must compile and pass where the compiler may not
# assume their instruction sets (an intrinsic inside a lambda does not).
# QAT_CLANG=1 builds the same portable tree with Clang (build-clang/): Clang
# outlines OpenMP regions into functions of their own, which do not inherit a
# target attribute, and has its own idea of which C++20 features it supports.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the build and the tests need (packages, ONNX Runtime's virtual
# environment for the ONNX tests): this command stands alone on a fresh
# machine. A no-op, in a second or two, when everything is there.
bash scripts/setup.sh
jobs=${JOBS:-2}
if [ "${QAT_CLANG:-0}" = "1" ]; then
  dir=build-clang
  cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DQAT_NATIVE=OFF -DQAT_CUDA=OFF >/dev/null
elif [ "${QAT_PORTABLE:-0}" = "1" ]; then
  dir=build-portable
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DQAT_NATIVE=OFF -DQAT_CUDA=OFF >/dev/null
elif [ "${QAT_SANITIZE:-0}" = "1" ]; then
  dir=build-asan
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQAT_SANITIZE=ON -DQAT_NATIVE=ON >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
# Empty OpenMP registration files crash Clang binaries at start-up (the
# script says why); the build's test discovery runs the test binary.
bash scripts/clean_omp_registrations.sh
cmake --build "$dir" -j"$jobs"
# Two ctest jobs on two cores: each test runs single-threaded (QAT_TEST_THREADS).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ctest --test-dir "$dir" -j"$jobs" --output-on-failure
