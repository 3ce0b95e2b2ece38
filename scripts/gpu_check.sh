#!/usr/bin/env bash
# The GPU check (docs/cuda.md): builds qat with CUDA in build-gpu/
# (-DQAT_CUDA=ON: no toolkit, no build) and runs every GPU test (Catch2 tag
# [cuda]) plus the CPU tests of the per-element rules the kernels share
# ([math]), with QAT_REQUIRE_GPU=1 so that a test that would be skipped for
# want of a GPU fails instead. Prints the GPU, each test's time and a summary.
# Then the benchmark lines: training-step img/s on the GPU (`qat bench
# --device cuda`: FP32, QAT, QAT with the integer forward and INT8
# training) beside the same on
# the CPU, and inference img/s (`qat bench --infer --device cuda`: FP32 and
# the integer model, its logits checked against the CPU's) beside the CPU.
# For a machine with an NVIDIA GPU; fails loudly when none is visible.
# Budget: under 5 minutes on 16 cores (the build is most of it; the tests
# have 240 s, each benchmark 120 s).
#   bash scripts/gpu_check.sh            # JOBS=N to change the build's parallelism
#   QAT_GPU_BUNDLE=.gpu_bundle/qat-gpu.tar.xz bash scripts/gpu_check.sh   # built by scripts/gpu_bundle.sh
#   QAT_GPU_TEST_LIMIT=S QAT_GPU_BENCH_LIMIT=S   # seconds for the tests (240) and each benchmark (120)
#   QAT_GPU_EACH_LIMIT=S   # seconds in all for the tests one by one, run when the single run broke off (150)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
jobs=${JOBS:-$(nproc)}
log_dir=build-gpu
# Seconds for the GPU tests and for each benchmark: a lent GPU comes with a
# few minutes of device time, so a first run may ask for less.
test_limit=${QAT_GPU_TEST_LIMIT:-240}
bench_limit=${QAT_GPU_BENCH_LIMIT:-120}
fail() {
  echo "gpu_check: FAILED: $*" >&2
  exit 1
}
elapsed() { echo "$(( $(date +%s) - start )) s"; }

# 1. A GPU the driver can see (before spending minutes on the build).
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L || fail "nvidia-smi lists no GPU (driver not loaded, or no device visible: CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES:-}')"
  nvidia-smi -L | grep -q . || fail "nvidia-smi lists no GPU"
else
  echo "gpu_check: nvidia-smi not found; the CUDA runtime's answer below decides"
fi

# 2. qat with CUDA: the bundle built elsewhere (scripts/gpu_bundle.sh: for a
#    GPU machine without qat's libraries or a package registry), or a build here.
mkdir -p "$log_dir"
if [ -n "${QAT_GPU_BUNDLE:-}" ]; then
  [ -f "$QAT_GPU_BUNDLE" ] || fail "QAT_GPU_BUNDLE=$QAT_GPU_BUNDLE: no such file (make it with scripts/gpu_bundle.sh)"
  stage=$PWD/.gpu_bundle/stage
  rm -rf "$stage" && mkdir -p "$stage" && tar -C "$stage" -xJf "$QAT_GPU_BUNDLE"
  # The binaries read the sample data and golden files under the path they
  # were built in: point it at this checkout.
  src=$(cat "$stage/source_dir")
  if [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
  [ -d "$src/data/samples" ] || fail "$src holds no checkout of qat (the bundle's source path)"
  # CUDA's libraries as this machine has them (toolkit or Python wheels).
  cuda_dirs=$(find /usr/local /usr/lib /opt \( -name 'libcudnn.so.9' -o -name 'libcublas.so.13' -o \
    -name 'libcudart.so.13' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH="$stage/lib:${cuda_dirs}${LD_LIBRARY_PATH:-}"
  bin=$stage/bin
  echo "gpu_check: bundle $QAT_GPU_BUNDLE (built from $src); CUDA libraries from: ${cuda_dirs:-none found}"
  ldd "$bin/qat_tests" | grep "not found" && fail "libraries missing (above)"
else
  echo "gpu_check: configuring build-gpu (QAT_CUDA=ON) ..."
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DQAT_CUDA=ON >"$log_dir/configure.log" 2>&1 ||
    { tail -30 "$log_dir/configure.log"; fail "configure (see $log_dir/configure.log; on a machine without qat's libraries use scripts/gpu_bundle.sh)"; }
  grep "qat: CUDA" "$log_dir/configure.log" || true
  echo "gpu_check: building qat and qat_tests with $jobs jobs ..."
  cmake --build build-gpu -j"$jobs" --target qat qat_tests >"$log_dir/build.log" 2>&1 ||
    { grep -E -B2 -A8 "error|warning" "$log_dir/build.log" | head -80; fail "build (see $log_dir/build.log)"; }
  bin=build-gpu
  echo "gpu_check: built in $(elapsed)"
fi

# 3. The GPU as the CUDA runtime sees it (the device-report test fails
#    under QAT_REQUIRE_GPU=1 when there is none, with the runtime's reason).
export QAT_REQUIRE_GPU=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4}
if ! timeout 60 "$bin/qat_tests" "cuda: the build and the device are reported*" >"$log_dir/device.log" 2>&1; then
  grep -A4 "with message" "$log_dir/device.log" | grep -v "with message" | sed 's/^ */  /' >&2 || true
  fail "no GPU that the CUDA runtime can use (reason above; $log_dir/device.log)"
fi

# 4. Every GPU test: a missing GPU is a failure here, not a skip.
status=0
timeout "$test_limit" "$bin/qat_tests" "[cuda],[math]" --durations yes 2>&1 | tee "$log_dir/tests.log" || status=$?
if grep -q "skipped: no CUDA device\|skipped: this qat was built without CUDA" "$log_dir/tests.log"; then
  fail "a GPU test was skipped for want of a GPU (see $log_dir/tests.log)"
fi
# The single run broke off (a crash, the time limit) or a kernel fault left
# its CUDA error on the context, failing every test after it: each [cuda]
# test again in a process of its own, so that one fault hides nothing.
if ! grep -q "^All tests passed\|^test cases:" "$log_dir/tests.log" ||
  grep -q "cudaErrorIllegal\|cudaErrorLaunch\|unspecified launch failure" "$log_dir/tests.log"; then
  echo "gpu_check: the test run broke off or hit a sticky CUDA error; each [cuda] test alone:"
  bash scripts/gpu_tests_each.sh "$bin" "${QAT_GPU_EACH_LIMIT:-150}" 2>&1 | tee "$log_dir/tests_each.log" || true
fi

# 5. Benchmarks, also when a test failed (their lines help find out why):
#    AlexNet-BN 128 px batch 32, the training step on the GPU beside the CPU.
bench_cfg=configs/alexnet_w8a8_imagenette.yaml
echo
echo "gpu_check: benchmarks"
timeout "$bench_limit" "$bin/qat" bench --device cuda --config "$bench_cfg" --steps 20 --warmup 3 2>&1 |
  tee "$log_dir/bench_cuda.log" | grep -E "^(device|train|qat/|int8/)" | sed 's/^/  /' || echo "  bench --device cuda failed (see $log_dir/bench_cuda.log)"
timeout "$bench_limit" "$bin/qat" bench --config "$bench_cfg" --threads "$(nproc)" --steps 5 --warmup 1 --no-profile 2>&1 |
  tee "$log_dir/bench_cpu.log" | grep -E "^(cpu|train|qat/|int8/)" | sed 's/^/  /' || echo "  bench on the CPU failed (see $log_dir/bench_cpu.log)"
# QAT with the integer forward (the DP4A kernel against cuDNN's FP32
# convolution of the line before): whether it pays on this GPU.
timeout "$bench_limit" "$bin/qat" bench --device cuda --config configs/alexnet_w8a8_intfwd_imagenette.yaml --steps 20 --warmup 3 2>&1 |
  tee "$log_dir/bench_intfwd_cuda.log" | grep -E "^(train qat|qat/)" | sed 's/^/  integer forward: /' ||
  echo "  bench --device cuda (integer forward) failed (see $log_dir/bench_intfwd_cuda.log)"
# INT8 training (integer GEMMs forward and backward) on the GPU, beside the CPU.
int8_cfg=configs/alexnet_int8_imagenette.yaml
timeout "$bench_limit" "$bin/qat" bench --device cuda --config "$int8_cfg" --steps 20 --warmup 3 2>&1 |
  tee "$log_dir/bench_int8_cuda.log" | grep -E "^(train|int8/)" | sed 's/^/  /' || echo "  bench --device cuda (INT8 training) failed (see $log_dir/bench_int8_cuda.log)"
timeout "$bench_limit" "$bin/qat" bench --config "$int8_cfg" --threads "$(nproc)" --steps 5 --warmup 1 --no-profile 2>&1 |
  tee "$log_dir/bench_int8_cpu.log" | grep -E "^(train|int8/)" | sed 's/^/  /' || echo "  bench on the CPU (INT8 training) failed (see $log_dir/bench_int8_cpu.log)"
# Inference: FP32 and the frozen integer model on the GPU (which also
# requires the integer logits to equal the CPU's), at 128 and 224 px, beside
# the CPU at 128 px.
for res in 128 224; do
  timeout "$bench_limit" "$bin/qat" bench --infer --device cuda --res "$res" --steps 20 --warmup 3 2>&1 |
    tee "$log_dir/bench_infer_cuda_$res.log" | grep -E "^(bench|infer|int8/)" | sed 's/^/  /' ||
    echo "  bench --infer --device cuda --res $res failed (see $log_dir/bench_infer_cuda_$res.log)"
done
timeout "$bench_limit" "$bin/qat" bench --infer --threads "$(nproc)" --steps 5 --warmup 1 --no-profile 2>&1 |
  tee "$log_dir/bench_infer_cpu.log" | grep -E "^(infer|int8/)" | sed 's/^/  /' || echo "  bench --infer on the CPU failed (see $log_dir/bench_infer_cpu.log)"

[ "$status" -eq 0 ] || fail "GPU tests (exit status $status; $log_dir/tests.log)"

echo
echo "gpu_check: summary"
grep -A1 "GPU: " "$log_dir/tests.log" | grep -v "^--" | sed 's/^ */  /' || true
grep -E "^All tests passed|^test cases:" "$log_dir/tests.log" | sed 's/^/  /'
echo "  [cuda] tests: $("$bin/qat_tests" "[cuda]" --list-test-names-only | grep -c .), total time $(elapsed)"
echo "gpu_check: PASSED"
