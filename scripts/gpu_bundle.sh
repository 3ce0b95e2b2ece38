#!/usr/bin/env bash
# Prepares the GPU check for a lent GPU machine (docs/cuda.md): that machine
# reaches no package registry and has none of qat's libraries (OpenBLAS,
# yaml-cpp, ONNX, ...), so qat is built HERE with CUDA, for any x86-64 CPU
# (QAT_NATIVE=OFF: the kernels are still chosen at run time) and without MPI,
# and packed with the shared libraries it needs beyond glibc, libstdc++,
# the driver, cuBLAS and cuDNN into .gpu_bundle/qat-gpu.tar.xz (git ignores it; about 20 MB).
# The binaries keep this checkout's paths (/work/main/...) for the sample data
# and the golden files; gpu_check.sh links that path to the checkout there.
#   bash scripts/gpu_bundle.sh          # JOBS=N to change the build's parallelism
# then, on the GPU machine (the device tool's run):
#   QAT_GPU_BUNDLE=.gpu_bundle/qat-gpu.tar.xz bash scripts/gpu_check.sh     carry: [".gpu_bundle"]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stage=$root/.gpu_bundle/stage
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib"
cmake -S . -B build-gpu-bundle -DCMAKE_BUILD_TYPE=Release -DQAT_CUDA=ON -DQAT_NATIVE=OFF -DQAT_MPI=OFF \
  -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$stage/bin" >/dev/null
cmake --build build-gpu-bundle -j"${JOBS:-2}" --target qat qat_tests
strip "$stage/bin/qat" "$stage/bin/qat_tests"
# What ldd resolves, less glibc, the C++ runtime (the GPU machine's is newer
# and backward compatible), the driver and cuBLAS/cuDNN (hundreds of MB: the
# machine's own; the GPU check prints their versions). The CUDA runtime the
# binaries were built with travels (drivers run newer minor versions).
ldd "$stage/bin/qat_tests" "$stage/bin/qat" | awk '/=> \//{print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so' |
  grep -v -E '/lib(cuda|cublas|cublasLt|cudnn[a-z_]*|nvrtc|nvJitLink)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
printf '%s\n' "$root" >"$stage/source_dir"  # the path compiled into the binaries
tar -C "$stage" -cJf "$root/.gpu_bundle/qat-gpu.tar.xz" .
rm -rf "$stage"
ls -l "$root/.gpu_bundle/qat-gpu.tar.xz"
echo "gpu_bundle: ready; carry .gpu_bundle and run QAT_GPU_BUNDLE=.gpu_bundle/qat-gpu.tar.xz bash scripts/gpu_check.sh"
