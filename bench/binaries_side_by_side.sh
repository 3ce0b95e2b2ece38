#!/usr/bin/env bash
# Two qat binaries (before and after a change meant to keep speed), in one
# sitting, their runs alternated: the training step in FP32, W8A8 QAT and
# INT8 training, and --infer (FP32 eval forward and the frozen integer
# model) on AlexNet-BN at 128 px, batch 32, 2 threads. Prints each run's
# figures and the median per binary.
# Usage: bench/binaries_side_by_side.sh QAT_BEFORE QAT_AFTER CHECKPOINT [ROUNDS]
#   CHECKPOINT: a W8A8 QAT checkpoint of configs/quickstart_w8a8.yaml (for --infer)
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2 ckpt=$3 rounds=${4:-3}
echo "# $(date -u) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores"
export OMP_NUM_THREADS=2
common=(--res 128 --batch 32 --threads 2 --no-profile)
out=$(mktemp)
for r in $(seq "$rounds"); do
  for side in before after; do
    bin=$before; [ "$side" = after ] && bin=$after
    "$bin" bench "${common[@]}" --steps 10 --config configs/quickstart_w8a8.yaml |
      grep -E '^train (fp32|w8a8|qat)' | sed "s/^/$side /" | tee -a "$out"
    "$bin" bench "${common[@]}" --steps 10 --config configs/alexnet_int8_imagenette.yaml |
      grep -E '^train int8' | sed "s/^/$side /" | tee -a "$out"
    "$bin" bench "${common[@]}" --steps 20 --infer --config configs/quickstart_w8a8.yaml --checkpoint "$ckpt" |
      grep -E '^infer (fp32|int8)' | sed "s/^/$side /" | tee -a "$out"
  done
done
echo "# medians (ms per step or batch)"
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, kind, what = line.split()[:3]
    ms = float(re.search(r'\(([0-9.]+) ms/', line).group(1))
    rows.setdefault((kind + ' ' + what.rstrip(':')), {}).setdefault(side, []).append(ms)
for k, v in rows.items():
    b, a = statistics.median(v['before']), statistics.median(v['after'])
    print(f'{k:12s} before {b:8.2f}  after {a:8.2f}  after/before {a / b:.3f}')
PY
rm -f "$out"
