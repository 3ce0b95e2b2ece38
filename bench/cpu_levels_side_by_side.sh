#!/bin/bash
# qat beside PyTorch as on an AVX2-only CPU and on an AVX-VNNI CPU without
# AVX-512, both emulated on a newer x86 CPU: qat built for Haswell
# (BUILD, default build-avx2: cmake -S . -B build-avx2 -DQAT_NATIVE=OFF
# -DCMAKE_CXX_FLAGS=-march=haswell) and capped with QAT_MAX_CPU_ISA; PyTorch
# capped with ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA. Prints to stdout.
# Usage: bash bench/cpu_levels_side_by_side.sh [rounds]
set -u
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
Q=${BUILD:-build-avx2}/qat
PY=/usr/bin/python3
echo "# $(date) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores, qat $(git rev-parse --short HEAD) ($Q), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "# level avx2: QAT_MAX_CPU_ISA=avx2; PyTorch ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"
echo "# level avx_vnni: QAT_MAX_CPU_ISA=avx_vnni; PyTorch ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2_VNNI"
pick() { grep -E "$1" | sed "s/^/$2 /"; }
for r in $(seq "$ROUNDS"); do
  echo "## training, round $r, level avx2"
  QAT_MAX_CPU_ISA=avx2 $Q bench --threads 2 --steps 10 --no-profile --config configs/alexnet_w8a8_imagenette.yaml 2>&1 | pick "kernels|img/s|qat/fp32" "qat    "
  for b in train qat; do
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 $PY bench/pytorch_${b}_bench.py --res 128 --batch 32 --threads 2 2>&1 | pick "img/s" "pytorch"
  done
  for lvl in avx2 avx_vnni; do
    echo "## INT8 training, round $r, level $lvl"
    QAT_MAX_CPU_ISA=$lvl $Q bench --config configs/alexnet_int8_imagenette.yaml --threads 2 --steps 10 --no-profile 2>&1 | pick "kernels|img/s|int8/fp32" "qat    "
  done
done
for lvl in avx2 avx_vnni; do
  isa=AVX2; [ "$lvl" = avx_vnni ] && isa=AVX2_VNNI
  for rb in "128 32" "128 1" "224 32" "224 1"; do
    set -- $rb
    echo "## inference, level $lvl, res $1, batch $2"
    QAT_MAX_CPU_ISA=$lvl $Q bench --infer --res "$1" --batch "$2" --threads 2 --no-profile 2>&1 | pick "kernels|infer " "qat    "
    if [ "$lvl" = avx2 ]; then  # 7-bit activations: the exact vpmaddubsw kernel
      QAT_MAX_CPU_ISA=$lvl $Q bench --infer --res "$1" --batch "$2" --threads 2 --no-profile \
        --config configs/alexnet_w8a7_imagenette.yaml 2>&1 | pick "infer int8" "qat A7 "
    fi
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=$isa $PY bench/pytorch_int8_infer_bench.py --res "$1" --batch "$2" --threads 2 2>&1 | pick "img/s" "pytorch"
  done
done
