#!/bin/bash
# MobileNetV2 INT8 training from scratch on CIFAR-10 at 32 px (the shipped
# config, full method), its eval running the integer model's layers and
# residual adds, then compare-layers on every val image. From the
# repository root:
#   bash results/mobilenet_v2_int8_integer_eval_2026-12-07/run.sh DATA WORK
set -e
Q=${QAT:-build/qat}
D=${1:?the folder holding cifar10}/cifar10
R=${2:?a work folder}
mkdir -p $R
data=(--set data.train=$D/train --set data.val=$D/val)
$Q train configs/mobilenet_v2_int8_cifar10.yaml "${data[@]}" --set output.dir=$R/int8 > $R/int8.log 2>&1
$Q compare-layers configs/mobilenet_v2_int8_cifar10.yaml "${data[@]}" --checkpoint $R/int8/best.safetensors \
  --images 0 > $R/compare_int8.log 2>&1
echo done > $R/DONE
