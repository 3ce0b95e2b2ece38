#!/usr/bin/env bash
# Two qat binaries in turn (BEFORE, AFTER: built from the commits compared),
# ROUNDS rounds over the cases, each "MODEL RES CONFIG": `qat bench
# --config CONFIG` at RES px (32: the small stem), batch 32, 2 threads, FP32
# and quantized steps taken in turn. Each line ends with the whole run's
# quantized/FP32 step ratio.
#   bash bench/configs_in_turn.sh BEFORE AFTER ROUNDS "resnet18 128 configs/resnet18_int8_imagenette.yaml" ...
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2 rounds=$3
shift 3
lscpu | grep 'Model name'
run() {  # binary, then bench arguments
  local bin=$1; shift
  "$bin" bench --batch 32 --steps 5 --warmup 2 --threads 2 --no-profile "$@" 2>&1 |
    grep -E '^train|step time' | cut -d'(' -f1-2 | tr '\n' ' '
  echo
}
for r in $(seq "$rounds"); do
  for case in "$@"; do
    read -r model res config <<<"$case"
    extra=(--res "$res"); [ "$res" = 32 ] && extra+=(--stem small)
    for side in before after; do
      bin=$before; [ "$side" = after ] && bin=$after
      echo "round $r, $model $res px, $(basename "$config"), $side: $(run "$bin" --model "$model" --config "$config" "${extra[@]}")"
    done
  done
done
