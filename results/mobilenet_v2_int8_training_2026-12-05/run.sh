#!/usr/bin/env bash
# MobileNetV2 on CIFAR-10 at 32 px trained from scratch, 3 epochs each of the
# FP32 recipe (configs/mobilenet_v2_cifar10.yaml): INT8 training with the full
# method (direction-sensitive clipping, error-sensitive learning rates), the
# naive one (clip at max |g|, no learning-rate scaling), and FP32, side by
# side on one thread each. Then the comparison page and the per-layer
# table. Run from the repository root:
#   bash results/mobilenet_v2_int8_training_2026-12-05/run.sh WORK
set -euo pipefail
QAT=${QAT:-build/qat}
WORK=${1:?work folder}
HERE=results/mobilenet_v2_int8_training_2026-12-05
mkdir -p "$WORK"
INT8=(configs/mobilenet_v2_int8_cifar10.yaml --set train.epochs=3 --set train.threads=1)
[ -f "$WORK/full/best.safetensors" ] ||
  $QAT train "${INT8[@]}" --set output.dir="$WORK/full" > "$WORK/full.log" 2>&1 &
[ -f "$WORK/naive/best.safetensors" ] ||
  $QAT train "${INT8[@]}" --set quant.int8_training.clipping=max \
    --set quant.int8_training.lr_scaling.enabled=false --set output.dir="$WORK/naive" > "$WORK/naive.log" 2>&1 &
[ -f "$WORK/fp32/best.safetensors" ] ||
  $QAT train configs/mobilenet_v2_cifar10.yaml --set train.epochs=3 --set train.threads=1 \
    --set output.dir="$WORK/fp32" > "$WORK/fp32.log" 2>&1 &
wait
for run in fp32 naive full; do
  mkdir -p "$HERE/$run"
  cp "$WORK/$run"/{config.yaml,metrics.csv,metrics.jsonl} "$HERE/$run/"
  cp "$WORK/$run.log" "$HERE/$run/train.log"
done
$QAT compare "$WORK/fp32" "$WORK/naive" "$WORK/full" --out "$WORK/compare" > /dev/null
cp "$WORK"/compare/*.md "$WORK"/compare/*.svg "$HERE/"
python3 results/int8_training/layer_table.py "$WORK/naive" "$WORK/full" > "$HERE/layers.md"
