#!/usr/bin/env bash
# ResNet-18 on Imagenette at 128 px: the FP32 recipe (5 epochs), then W8A8
# QAT from it twice, with the float forward and with quant.integer_forward,
# each compared with its frozen integer model on every val image
# (compare-layers). Run from the repository root:
#   bash results/resnet18_integer_forward_2026-12-06/run.sh DATA WORK
# DATA: the folder holding imagenette/{train,val}.
set -euo pipefail
QAT=${QAT:-build/qat}
DATA=${1:?dataset folder}
WORK=${2:?work folder}
HERE=results/resnet18_integer_forward_2026-12-06
mkdir -p "$WORK"
D=(--set data.train="$DATA/imagenette/train" --set data.val="$DATA/imagenette/val")
keep() {  # keep a run's small files
  mkdir -p "$HERE/$2"
  cp "$1"/{config.yaml,metrics.csv} "$HERE/$2/" 2>/dev/null || true
  cp "$1.log" "$HERE/$2/train.log" 2>/dev/null || true
}
[ -f "$WORK/fp32/best.safetensors" ] ||
  $QAT train configs/resnet18_imagenette.yaml "${D[@]}" --set output.dir="$WORK/fp32" > "$WORK/fp32.log" 2>&1
keep "$WORK/fp32" fp32
for run in float integer_forward; do
  W8=(configs/resnet18_w8a8_imagenette.yaml "${D[@]}" --set quant.init_from="$WORK/fp32/best.safetensors")
  if [ "$run" = integer_forward ]; then W8+=(--set quant.integer_forward=true); else W8+=(--set quant.integer_forward=false); fi
  [ -f "$WORK/$run/best.safetensors" ] ||
    $QAT train "${W8[@]}" --set output.dir="$WORK/$run" > "$WORK/$run.log" 2>&1
  keep "$WORK/$run" "$run"
  $QAT compare-layers "${W8[@]}" --checkpoint "$WORK/$run/best.safetensors" --images 0 \
    > "$HERE/$run/compare_layers.log" 2>&1
done
echo done
