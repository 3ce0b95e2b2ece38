#!/usr/bin/env bash
# ONNX import of what users really have (issue 42): torchvision's ResNet-18
# and MobileNetV2 exported by torch.onnx.export in eval mode (BN folded) and
# with BN kept, run in ONNX Runtime and imported by qat, logits compared.
#   bash bench/onnx_import_torchvision.sh [DIR]
# Needs Debian's python3-torch and python3-torchvision, the build (build/),
# and ONNX Runtime's virtual environment (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d /tmp/qat_tv_onnx.XXXXXX)}
/usr/bin/python3 bench/torchvision_onnx_export.py "$dir"
for f in "$dir"/*.onnx; do
  .venv-onnx/bin/python tests/onnx/ort_run.py "$f" "$dir/input.f32" 2 3 64 64 "${f%.onnx}.ort.f32"
done
QAT_TORCHVISION_ONNX_DIR="$dir" build/qat_tests "[.onnx_torchvision]" -s 2>&1 | grep -E "state-dict|passed|failed"
