#!/bin/bash
# ResNet-18 on Imagenette at 128 px: the FP32 run, then W4A4 LSQ from its
# best checkpoint twice (the float forward, the shipped setting, and
# quant.integer_forward), same seed, each followed by compare-layers on
# every val image. From the repository root:
#   bash results/resnet18_w4a4_forward_twins_2026-12-07/run.sh DATA WORK
set -e
Q=${QAT:-build/qat}
D=${1:?the folder holding imagenette}/imagenette
R=${2:?a work folder}
mkdir -p $R
data=(--set data.train=$D/train --set data.val=$D/val)
$Q train configs/resnet18_imagenette.yaml "${data[@]}" --set output.dir=$R/fp32 > $R/fp32.log 2>&1
for fwd in false true; do
  $Q train configs/resnet18_w4a4_lsq_imagenette.yaml "${data[@]}" --set output.dir=$R/w4a4_if_$fwd \
    --set quant.init_from=$R/fp32/best.safetensors --set quant.integer_forward=$fwd > $R/w4a4_if_$fwd.log 2>&1
  $Q compare-layers configs/resnet18_w4a4_lsq_imagenette.yaml "${data[@]}" --set quant.integer_forward=$fwd \
    --checkpoint $R/w4a4_if_$fwd/best.safetensors --images 0 > $R/compare_w4a4_if_$fwd.log 2>&1
done
echo done > $R/DONE
