#!/usr/bin/env bash
# Installs every Debian package qat needs to build and test. Idempotent: a
# no-op when all of them are present. CUDA is optional and never installed here.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev   # BLAS (OpenMP threading, shares the thread setting with our own loops)
  libdnnl-dev              # oneDNN: the float convolutions' kernels (OpenMP threading too; the build PyTorch links)
  libyaml-cpp-dev          # YAML configs
  libstb-dev               # stb_image / stb_image_write / stb_image_resize
  catch2                   # unit tests (v2, catch2/catch.hpp)
  libcli11-dev             # command line
  nlohmann-json3-dev       # JSON header of safetensors files
  libssl-dev               # libcrypto's SHA-256: an export's manifest names the digest of its weights
  python3-numpy            # tests run the numpy reader example of docs/export_format.md
  libonnx-dev libprotobuf-dev   # ONNX export: ONNX's protobuf classes and checker
  python3-venv             # the virtual environment with ONNX Runtime for the ONNX tests
  openmpi-bin libopenmpi-dev   # data-parallel training: mpirun -np N qat train (and its tests)
  clang libclang-rt-dev libomp-dev   # libFuzzer targets (scripts/fuzz.sh): Clang, its sanitizer runtimes, OpenMP
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime and the onnx package (checker) for the ONNX export tests, in a
# virtual environment beside the sources (.venv-onnx, git-ignored); pinned.
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-onnx"
if ! "$venv/bin/python" -c 'import onnxruntime, onnx, numpy' >/dev/null 2>&1; then
  echo "setup: creating $venv (onnxruntime, onnx, numpy from PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check onnxruntime==1.20.1 onnx==1.17.0 numpy==1.26.4
fi
