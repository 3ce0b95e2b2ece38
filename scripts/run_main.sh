#!/usr/bin/env bash
# Fresh machine: install packages, build, and run the main job: AlexNet-BN
# trained on the embedded Imagenette sample (configs/quickstart.yaml, about a
# minute on 2 cores). Each call writes a new run directory under runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target qat
run_dir="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
./build/qat train configs/quickstart.yaml --set output.dir="$run_dir"
./build/qat eval configs/quickstart.yaml --checkpoint "$run_dir/best.safetensors"
