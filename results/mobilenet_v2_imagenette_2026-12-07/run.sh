#!/usr/bin/env bash
# MobileNetV2 (ImageNet stem) on Imagenette at 128 px: FP32 from scratch
# (configs/mobilenet_v2_imagenette.yaml, 8 epochs), W8A8 QAT from it
# (configs/mobilenet_v2_w8a8_imagenette.yaml, 2 epochs, the integer forward),
# its frozen integer model (export, eval, compare-layers on every val image),
# and PTQ of the FP32 checkpoint with every calibrator; then PyTorch's eager
# QAT from the same FP32 weights (bench/pytorch_qat_graph.py). Run from the
# repository root:
#   bash results/mobilenet_v2_imagenette_2026-12-07/run.sh DATASETS WORK
# (DATASETS holds imagenette/train and imagenette/val)
set -euo pipefail
QAT=${QAT:-build/qat}
DATA=${1:?datasets folder}
WORK=${2:?work folder}
HERE=results/mobilenet_v2_imagenette_2026-12-07
mkdir -p "$WORK"
AT=(--set data.train="$DATA/imagenette/train" --set data.val="$DATA/imagenette/val")
keep() {  # a run's small files
  mkdir -p "$HERE/$2"
  cp "$1"/{config.yaml,metrics.csv,metrics.jsonl} "$HERE/$2/" 2>/dev/null || true
  cp "$1.log" "$HERE/$2/train.log" 2>/dev/null || true
}
[ -f "$WORK/fp32/best.safetensors" ] ||
  $QAT train configs/mobilenet_v2_imagenette.yaml "${AT[@]}" --set output.dir="$WORK/fp32" > "$WORK/fp32.log" 2>&1
keep "$WORK/fp32" fp32
W8=(configs/mobilenet_v2_w8a8_imagenette.yaml "${AT[@]}" --set quant.init_from="$WORK/fp32/best.safetensors")
[ -f "$WORK/w8a8/best.safetensors" ] ||
  $QAT train "${W8[@]}" --set output.dir="$WORK/w8a8" > "$WORK/w8a8.log" 2>&1
keep "$WORK/w8a8" w8a8
$QAT export "${W8[@]}" --checkpoint "$WORK/w8a8/best.safetensors" --out "$WORK/int8" > "$HERE/w8a8/export.log" 2>&1
$QAT eval "${W8[@]}" --checkpoint "$WORK/int8" > "$HERE/w8a8/eval_integer.log" 2>&1
$QAT eval "${W8[@]}" --set quant.integer_forward=false --checkpoint "$WORK/w8a8/best.safetensors" \
  > "$HERE/w8a8/eval_fake_quant.log" 2>&1
$QAT compare-layers "${W8[@]}" --checkpoint "$WORK/w8a8/best.safetensors" --images 0 \
  > "$HERE/w8a8/compare_layers.log" 2>&1
# the float forward's fake-quant model against the same integer model
$QAT compare-layers "${W8[@]}" --set quant.integer_forward=false --checkpoint "$WORK/w8a8/best.safetensors" \
  --images 0 > "$HERE/w8a8/compare_layers_float_forward.log" 2>&1
$QAT calibrate "${W8[@]}" --checkpoint "$WORK/fp32/best.safetensors" --compare --out "$WORK/ptq" \
  > "$HERE/ptq_compare.log" 2>&1 || true
cp "$WORK"/ptq/*.md "$WORK"/ptq/*.svg "$HERE/" 2>/dev/null || true
/usr/bin/python3 bench/pytorch_qat_graph.py configs/mobilenet_v2_w8a8_imagenette.yaml \
  --fp32 "$WORK/fp32/best.safetensors" --threads 2 --csv "$HERE/pytorch_w8a8.csv" > "$HERE/pytorch_w8a8.log" 2>&1
echo done
