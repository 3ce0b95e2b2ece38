#!/usr/bin/env bash
# bench/configs_in_turn.sh on MobileNetV2's W8A8 config at 32 px and 128 px
# and ResNet-18's W8A8 config at 128 px with the float forward
# (quant.integer_forward false, from a copy of the config).
#   bash results/qat_step_2026-12-07/in_turn.sh BEFORE AFTER [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
float_cfg=$(mktemp --suffix=.yaml)
trap 'rm -f "$float_cfg"' EXIT
sed 's/integer_forward: true/integer_forward: false/' configs/resnet18_w8a8_imagenette.yaml > "$float_cfg"
grep -q 'integer_forward: false' "$float_cfg"
bash bench/configs_in_turn.sh "$1" "$2" "${3:-3}" "mobilenet_v2 32 configs/mobilenet_v2_w8a8_cifar10.yaml" \
  "mobilenet_v2 128 configs/mobilenet_v2_w8a8_cifar10.yaml" "resnet18 128 $float_cfg"
