#!/bin/bash
# Training-step speed, qat beside PyTorch 1.13, AlexNet-BN 128 px batch 32,
# 2 threads, alternated in one sitting: qat's FP32 and W8A8 QAT steps in turn
# (qat bench --config), PyTorch's FP32 step and its eager QAT step, then
# qat's INT8 training step beside its FP32 one. Prints to stdout.
# Usage: bash bench/train_side_by_side.sh [rounds]
set -u
ROUNDS=${1:-3}
source "$(dirname "$0")/sitting.sh"
for r in $(seq "$ROUNDS"); do
  echo "## round $r"
  $Q bench --threads 2 --steps 10 --no-profile --config configs/alexnet_w8a8_imagenette.yaml 2>&1 | pick "^kernels|img/s|qat/fp32" "qat    "
  for b in train qat; do
    $PY bench/pytorch_${b}_bench.py --res 128 --batch 32 --threads 2 2>&1 | pick "img/s" ""
  done
  $Q bench --threads 2 --steps 10 --no-profile --config configs/alexnet_int8_imagenette.yaml 2>&1 | pick "img/s|int8/fp32" "qat i8 "
done
