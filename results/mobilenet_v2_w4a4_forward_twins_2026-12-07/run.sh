#!/bin/bash
# MobileNetV2 W4A4 LSQ on CIFAR-10 with the float forward, from a given FP32
# checkpoint (the twin of ../mobilenet_v2_integer_forward_2026-12-07/w4a4_lsq_integer_forward),
# then compare-layers on every val image:
# From the repository root:
#   bash results/mobilenet_v2_w4a4_forward_twins_2026-12-07/run.sh DATA WORK FP32_CHECKPOINT
set -e
Q=${QAT:-build/qat}
D=${1:?the folder holding cifar10}/cifar10
R=${2:?a work folder}
mkdir -p $R
$Q train configs/mobilenet_v2_w4a4_lsq_cifar10.yaml --set data.train=$D/train --set data.val=$D/val --set output.dir=$R/w4a4_ff --set quant.init_from=${3:?the FP32 best.safetensors} --set quant.integer_forward=false > $R/w4a4_ff.log 2>&1
$Q compare-layers configs/mobilenet_v2_w4a4_lsq_cifar10.yaml --set data.train=$D/train --set data.val=$D/val --set quant.integer_forward=false --checkpoint $R/w4a4_ff/best.safetensors --images 0 > $R/compare_w4a4_ff.log 2>&1
echo done > $R/DONE_W4A4_FF
