#!/usr/bin/env bash
# Installs every Debian package qat needs to build and test. Idempotent: a
# no-op when all of them are present. CUDA is optional and never installed here.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev   # BLAS (OpenMP threading, shares the thread setting with our own loops)
  libyaml-cpp-dev          # YAML configs
  libstb-dev               # stb_image / stb_image_write / stb_image_resize
  catch2                   # unit tests (v2, catch2/catch.hpp)
  libcli11-dev             # command line
  nlohmann-json3-dev       # JSON header of safetensors files
  libssl-dev               # libcrypto's SHA-256: an export's manifest names the digest of its weights
  python3-numpy            # tests run the numpy reader example of docs/export_format.md
  clang libclang-rt-dev libomp-dev   # libFuzzer targets (scripts/fuzz.sh): Clang, its sanitizer runtimes, OpenMP
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
