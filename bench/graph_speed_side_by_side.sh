#!/usr/bin/env bash
# Training-step speed of the graph models beside PyTorch (issue 42): for each
# network, qat bench (with the environment's OpenBLAS core, and with the core
# OpenBLAS picks itself: OPENBLAS_CORETYPE unset) and PyTorch 1.13's script,
# alternated ROUNDS times, 2 threads, batch 32, synthetic data.
#   bash bench/graph_speed_side_by_side.sh [ROUNDS] > speed.txt
# Needs build/qat and Debian's python3-torch / python3-torchvision.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
lscpu | grep 'Model name'
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}"
while read -r model stem res; do
  for r in $(seq "$rounds"); do
    echo "== $model $stem $res px, round $r"
    ./build/qat bench --model "$model" --stem "$stem" --res "$res" --batch 32 --threads 2 --steps 5 --warmup 2 \
      --no-profile | grep '^train' | sed 's/^/qat (environment core) /'
    env -u OPENBLAS_CORETYPE ./build/qat bench --model "$model" --stem "$stem" --res "$res" --batch 32 --threads 2 \
      --steps 5 --warmup 2 --no-profile | grep '^train' | sed 's/^/qat (OpenBLAS picks) /'
    /usr/bin/python3 bench/pytorch_graph_models.py bench --model "$model" --stem "$stem" --res "$res" --batch 32 \
      --threads 2 --steps 5 --warmup 2 | grep '^train' | sed 's/^/pytorch /'
  done
done <<'MODELS'
resnet18 imagenet 128
mobilenet_v2 imagenet 128
mobilenet_v2 small 32
resnet20 imagenet 32
MODELS
