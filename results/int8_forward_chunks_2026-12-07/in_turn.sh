#!/usr/bin/env bash
# Two qat binaries in turn (BEFORE, AFTER: built from the commits compared),
# ROUNDS rounds: `qat bench --config` on ResNet-18's INT8-training and W8A8
# (integer forward) configs at 128 px and MobileNetV2's INT8-training config
# at 32 px, 2 threads, batch 32; each line ends with the whole run's
# quantized/FP32 step ratio (steps taken in turn with the FP32 model's).
#   bash results/int8_forward_chunks_2026-12-07/in_turn.sh BEFORE AFTER [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
before=$1 after=$2 rounds=${3:-3}
lscpu | grep 'Model name'
run() {  # binary, then bench arguments
  local bin=$1; shift
  "$bin" bench --batch 32 --steps 5 --warmup 2 --threads 2 --no-profile "$@" 2>&1 |
    grep -E '^train|step time' | cut -d'(' -f1-2 | tr '\n' ' '
  echo
}
for r in $(seq "$rounds"); do
  for what in "resnet18 configs/resnet18_int8_imagenette.yaml" "resnet18 configs/resnet18_w8a8_imagenette.yaml" \
              "mobilenet_v2 configs/mobilenet_v2_int8_cifar10.yaml"; do
    set -- $what
    extra=(--res 128); [ "$1" = mobilenet_v2 ] && extra=(--stem small --res 32)
    for b in before after; do
      bin=$before; [ $b = after ] && bin=$after
      echo "round $r, $1, $(basename "$2"), $b: $(run "$bin" --model "$1" --config "$2" "${extra[@]}")"
    done
  done
done
