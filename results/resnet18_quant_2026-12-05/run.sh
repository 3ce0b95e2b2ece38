#!/usr/bin/env bash
# ResNet-18 on Imagenette at 128 px, quantized from the FP32 run of
# results/graph_fp32_2026-12-05 (5 epochs, 70.32%): W8A8 QAT, its frozen
# integer model (eval, compare-layers on all val images), PTQ with every
# calibrator, W4A4 LSQ, and INT8 training from scratch. One thread each, one
# after the other. Run from the repository root:
#   bash results/resnet18_quant_2026-12-05/run.sh FP32_CHECKPOINT WORK
set -euo pipefail
QAT=${QAT:-build/qat}
FP32=${1:?FP32 checkpoint}
WORK=${2:?work folder}
HERE=results/resnet18_quant_2026-12-05
mkdir -p "$WORK"
keep() {  # keep a run's small files
  mkdir -p "$HERE/$2"
  cp "$1"/{config.yaml,metrics.csv,metrics.jsonl} "$HERE/$2/" 2>/dev/null || true
  cp "$1.log" "$HERE/$2/train.log" 2>/dev/null || true
}
ONE=(--set train.threads=1 --set quant.init_from="$FP32")
# (the float forward these runs used; the config has since set quant.integer_forward)
W8=(configs/resnet18_w8a8_imagenette.yaml "${ONE[@]}" --set quant.integer_forward=false)
[ -f "$WORK/w8a8/best.safetensors" ] ||
  $QAT train "${W8[@]}" --set output.dir="$WORK/w8a8" > "$WORK/w8a8.log" 2>&1
keep "$WORK/w8a8" w8a8
$QAT export "${W8[@]}" --checkpoint "$WORK/w8a8/best.safetensors" --out "$WORK/int8" > "$HERE/w8a8/export.log" 2>&1
OMP_NUM_THREADS=1 $QAT eval "${W8[@]}" --checkpoint "$WORK/int8" > "$HERE/w8a8/eval_integer.log" 2>&1
OMP_NUM_THREADS=1 $QAT compare-layers "${W8[@]}" --checkpoint "$WORK/w8a8/best.safetensors" --images 0 \
  > "$HERE/w8a8/compare_layers.log" 2>&1
OMP_NUM_THREADS=1 $QAT calibrate "${W8[@]}" --checkpoint "$FP32" --compare --out "$WORK/ptq" \
  > "$HERE/ptq_compare.log" 2>&1 || true
cp "$WORK"/ptq/*.md "$WORK"/ptq/*.svg "$HERE/" 2>/dev/null || true
[ -f "$WORK/w4a4/best.safetensors" ] ||
  $QAT train configs/resnet18_w4a4_lsq_imagenette.yaml "${ONE[@]}" --set output.dir="$WORK/w4a4" \
    > "$WORK/w4a4.log" 2>&1
keep "$WORK/w4a4" w4a4
[ -f "$WORK/int8_full/best.safetensors" ] ||
  $QAT train configs/resnet18_int8_imagenette.yaml --set train.threads=1 --set output.dir="$WORK/int8_full" \
    > "$WORK/int8_full.log" 2>&1
keep "$WORK/int8_full" int8_full
echo done
