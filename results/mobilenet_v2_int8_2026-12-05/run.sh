#!/usr/bin/env bash
# MobileNetV2 on CIFAR-10 at 32 px: FP32, W8A8 QAT from it, the frozen
# integer model (eval, compare-layers on all val images), and PTQ with every
# calibrator. Run from the repository root: bash results/mobilenet_v2_int8_2026-12-05/run.sh WORK
set -euo pipefail
QAT=${QAT:-build/qat}
WORK=${1:?work folder}
HERE=results/mobilenet_v2_int8_2026-12-05
mkdir -p "$WORK"
keep() {  # keep a run's small files
  mkdir -p "$HERE/$2"
  cp "$1"/{config.yaml,metrics.csv,metrics.jsonl,train.log} "$HERE/$2/" 2>/dev/null || true
}
[ -f "$WORK/fp32/best.safetensors" ] ||
  $QAT train configs/mobilenet_v2_cifar10.yaml --set output.dir="$WORK/fp32" > "$WORK/fp32.log" 2>&1
keep "$WORK/fp32" fp32
[ -f "$WORK/w8a8/best.safetensors" ] ||
  $QAT train configs/mobilenet_v2_w8a8_cifar10.yaml --set output.dir="$WORK/w8a8" \
    --set quant.init_from="$WORK/fp32/best.safetensors" > "$WORK/w8a8.log" 2>&1
keep "$WORK/w8a8" w8a8
W8=(configs/mobilenet_v2_w8a8_cifar10.yaml --set quant.init_from="$WORK/fp32/best.safetensors")
$QAT export "${W8[@]}" --checkpoint "$WORK/w8a8/best.safetensors" --out "$WORK/int8" > "$HERE/w8a8/export.log" 2>&1
$QAT eval "${W8[@]}" --checkpoint "$WORK/int8" > "$HERE/w8a8/eval_integer.log" 2>&1
$QAT eval "${W8[@]}" --checkpoint "$WORK/w8a8/best.safetensors" > "$HERE/w8a8/eval_fake_quant.log" 2>&1
$QAT compare-layers "${W8[@]}" --checkpoint "$WORK/w8a8/best.safetensors" --images 0 > "$HERE/w8a8/compare_layers.log" 2>&1
$QAT calibrate "${W8[@]}" --checkpoint "$WORK/fp32/best.safetensors" --compare \
  --out "$WORK/ptq" > "$HERE/ptq_compare.log" 2>&1 || true
cp "$WORK"/ptq/*.md "$WORK"/ptq/*.svg "$HERE/" 2>/dev/null || true
cp "$WORK"/fp32.log "$HERE/fp32/train.log"; cp "$WORK"/w8a8.log "$HERE/w8a8/train.log"
echo done
