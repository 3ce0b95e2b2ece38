#!/usr/bin/env bash
# Fresh machine: install packages, build, and run the main job on the embedded
# Imagenette sample (about 2 minutes on 2 cores): AlexNet-BN in FP32
# (configs/quickstart.yaml), then 8-bit and 4-bit QAT fine-tunes from it,
# a comparison table, and both QAT models frozen into integer models,
# exported, evaluated and run on one image. Each call writes new folders
# under runs/ (named by the start time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target qat
stamp="$(date +%Y%m%d-%H%M%S)"
fp32="runs/quickstart-$stamp"
./build/qat train configs/quickstart.yaml --set output.dir="$fp32"
./build/qat eval configs/quickstart.yaml --checkpoint "$fp32/best.safetensors"
for q in w8a8 w4a4_lsq; do
  run="runs/quickstart_$q-$stamp"
  ./build/qat train "configs/quickstart_$q.yaml" --set output.dir="$run" --set quant.init_from="$fp32/best.safetensors"
  ./build/qat compare-layers "configs/quickstart_$q.yaml" --checkpoint "$run/best.safetensors" --images 0
  ./build/qat export "configs/quickstart_$q.yaml" --checkpoint "$run/best.safetensors" --out "$run/export"
  ./build/qat export "configs/quickstart_$q.yaml" --checkpoint "$run/best.safetensors" --format onnx --out "$run/model.onnx"
  ./build/qat eval "configs/quickstart_$q.yaml" --checkpoint "$run/export"
  ./build/qat infer "$run/export" data/samples/imagenette-mini/val/n03394916 --top 3 | head -4
done
./build/qat compare "$fp32" "runs/quickstart_w8a8-$stamp" "runs/quickstart_w4a4_lsq-$stamp" --out "runs/compare-$stamp"
