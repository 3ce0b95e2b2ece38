#!/usr/bin/env bash
# Two qat binaries in turn (BEFORE, AFTER: built from the commits compared),
# ROUNDS rounds: `qat bench --config` (batch 32, 2 threads, FP32 and QAT
# steps taken in turn) on MobileNetV2's W8A8 config at 32 px and 128 px and
# ResNet-18's W8A8 config at 128 px with the float forward
# (quant.integer_forward false, from a copy of the config).
#   bash results/qat_step_2026-12-07/in_turn.sh BEFORE AFTER [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
before=$1 after=$2 rounds=${3:-3}
float_cfg=$(mktemp --suffix=.yaml)
trap 'rm -f "$float_cfg"' EXIT
sed 's/integer_forward: true/integer_forward: false/' configs/resnet18_w8a8_imagenette.yaml > "$float_cfg"
grep -q 'integer_forward: false' "$float_cfg"
lscpu | grep 'Model name'
run() {  # binary, then bench arguments
  local bin=$1; shift
  "$bin" bench --batch 32 --steps 5 --warmup 2 --threads 2 --no-profile "$@" 2>&1 |
    grep -E '^train|step time' | cut -d'(' -f1-2 | tr '\n' ' '
  echo
}
for r in $(seq "$rounds"); do
  for what in "mobilenet_v2 32 configs/mobilenet_v2_w8a8_cifar10.yaml" \
              "mobilenet_v2 128 configs/mobilenet_v2_w8a8_cifar10.yaml" "resnet18 128 $float_cfg"; do
    set -- $what
    extra=(--res "$2"); [ "$2" = 32 ] && extra+=(--stem small)
    for b in before after; do
      bin=$before; [ $b = after ] && bin=$after
      echo "round $r, $1 $2 px, $(basename "$3"), $b: $(run "$bin" --model "$1" --config "$3" "${extra[@]}")"
    done
  done
done
