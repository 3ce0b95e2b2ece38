#!/bin/bash
# INT8/FP32 training-step ratio of two qat binaries, in turn (run from the
# repository root): in_turn.sh CONFIG MODEL STEM RES STEPS ROUNDS BEFORE AFTER
# e.g. in_turn.sh configs/resnet18_int8_imagenette.yaml resnet18 imagenet 128 5 3 /tmp/qat_a8bf2f0 build/qat
set -euo pipefail
cfg=$1 model=$2 stem=$3 res=$4 steps=$5 rounds=$6
shift 6
for r in $(seq "$rounds"); do
  for b in "$@"; do
    echo "== $b round $r"
    "$b" bench --model "$model" --stem "$stem" --res "$res" --batch 32 --steps "$steps" --warmup 2 --threads 2 \
      --no-profile --config "$cfg" 2>&1 | grep -E "ms/step|step time"
  done
done
