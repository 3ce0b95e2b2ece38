#!/bin/bash
# ResNet-18 INT8 training from scratch on Imagenette at 128 px (the shipped
# config), its eval running the integer model's layers and residual adds,
# then compare-layers on every val image. From the repository root:
#   bash results/resnet18_int8_integer_eval_2026-12-07/run.sh DATA WORK
set -e
Q=${QAT:-build/qat}
D=${1:?the folder holding imagenette}/imagenette
R=${2:?a work folder}
mkdir -p $R
data=(--set data.train=$D/train --set data.val=$D/val)
$Q train configs/resnet18_int8_imagenette.yaml "${data[@]}" --set output.dir=$R/int8 > $R/int8.log 2>&1
$Q compare-layers configs/resnet18_int8_imagenette.yaml "${data[@]}" --checkpoint $R/int8/best.safetensors \
  --images 0 > $R/compare_int8.log 2>&1
echo done > $R/DONE
