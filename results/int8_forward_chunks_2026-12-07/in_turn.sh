#!/usr/bin/env bash
# bench/configs_in_turn.sh on ResNet-18's INT8-training and W8A8 (integer
# forward) configs at 128 px and MobileNetV2's INT8-training config at 32 px.
# (in_turn.txt and in_turn_final.txt were written by an earlier form of this
# script, which named each case without its resolution.)
#   bash results/int8_forward_chunks_2026-12-07/in_turn.sh BEFORE AFTER [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/configs_in_turn.sh "$1" "$2" "${3:-3}" "resnet18 128 configs/resnet18_int8_imagenette.yaml" \
  "resnet18 128 configs/resnet18_w8a8_imagenette.yaml" "mobilenet_v2 32 configs/mobilenet_v2_int8_cifar10.yaml"
