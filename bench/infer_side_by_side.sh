#!/bin/bash
# Integer and FP32 inference, qat beside PyTorch 1.13 (its oneDNN int8
# engine), AlexNet-BN W8A8, 2 threads, the four settings of the README's
# table, alternated in one sitting: per setting qat with the best kernel this
# CPU runs, qat with the kernels named in KERNELS (default: avx512_vnni, to
# show what the best one buys), then PyTorch. Prints to stdout.
# Usage: bash bench/infer_side_by_side.sh [rounds]
set -u
ROUNDS=${1:-2}
source "$(dirname "$0")/sitting.sh"
for r in $(seq "$ROUNDS"); do
  for rb in "128 32" "128 1" "224 32" "224 1"; do
    set -- $rb
    echo "## round $r, res $1, batch $2"
    $Q bench --infer --res "$1" --batch "$2" --threads 2 --no-profile 2>&1 | pick "^kernels|^infer " "qat    "
    for k in ${KERNELS:-avx512_vnni}; do
      $Q bench --infer --res "$1" --batch "$2" --threads 2 --no-profile --int8-kernel "$k" 2>&1 | pick "^infer int8" "qat $k"
    done
    $PY bench/pytorch_int8_infer_bench.py --res "$1" --batch "$2" --threads 2 2>&1 | pick "img/s" ""
  done
done
