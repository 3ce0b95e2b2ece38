#!/usr/bin/env bash
# bench/configs_in_turn.sh on ResNet-18's INT8-training and W8A8 (integer
# forward) configs at 128 px and MobileNetV2's INT8-training config at 32 px.
#   bash results/int8_step_2026-12-07b/in_turn.sh BEFORE AFTER [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/configs_in_turn.sh "$1" "$2" "${3:-3}" "resnet18 128 configs/resnet18_int8_imagenette.yaml" \
  "resnet18 128 configs/resnet18_w8a8_imagenette.yaml" "mobilenet_v2 32 configs/mobilenet_v2_int8_cifar10.yaml"
