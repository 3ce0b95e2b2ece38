#!/usr/bin/env bash
# Integer inference of the graph models beside PyTorch 1.13's eager INT8
# (torchvision's quantizable ResNet-18 and MobileNetV2, fused, calibrated,
# converted; oneDNN engine): qat bench --infer (the FP32 model and the
# frozen integer model, 8 bits on the default backend, observers set on random
# batches) then bench/pytorch_int8_graph_infer.py, alternated ROUNDS times,
# 2 threads, at 128 px, batch 32 and batch 1.
#   bash bench/graph_infer_side_by_side.sh [ROUNDS] > infer.txt
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
lscpu | grep 'Model name'
for r in $(seq "$rounds"); do
  for model in resnet18 mobilenet_v2; do
    for batch in 32 1; do
      echo "== $model 128 px batch $batch, round $r"
      steps=$((batch == 1 ? 64 : 8))
      ./build/qat bench --infer --model "$model" --res 128 --batch "$batch" --threads 2 --steps "$steps" \
        --no-profile | grep '^infer' | sed 's/^/qat     /'
      /usr/bin/python3 bench/pytorch_int8_graph_infer.py --model "$model" --res 128 --batch "$batch" --threads 2 \
        2>/dev/null | grep '^infer' | sed 's/^/pytorch /'
    done
  done
done
