#!/usr/bin/env bash
# Fresh machine: install, build, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target qat
./build/qat bench --model alexnet_bn --res 128 --batch 32 --threads 2
