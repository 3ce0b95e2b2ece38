#!/usr/bin/env bash
# Behaviour-preserving changes (issue 41): runs the main job (the quickstart
# FP32 run, W8A8 and W4A4-LSQ fine-tunes with compare-layers, both exports,
# eval and infer; plus two epochs of INT8 training and of the integer
# forward) with two qat binaries, one after the other in the same folder,
# then compares:
#   - the printed output line for line (speeds and times masked),
#   - every checkpoint's tensors byte for byte, and its metadata, except the
#     epoch's time and speed (metrics rows and the digest over them: they
#     differ between two runs of one binary),
#   - every export (manifest, weights, ONNX) byte for byte.
# Usage: scripts/same_outputs.sh QAT_BEFORE QAT_AFTER [WORK_DIR]   (~6 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
before=$(realpath "$1") after=$(realpath "$2") work=${3:-/tmp/qat_same_outputs}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=2

pipeline() {  # BIN OUT
  local bin=$1 o=$2
  $bin train configs/quickstart.yaml --set output.dir="$o/fp32" --set train.threads=2
  $bin eval configs/quickstart.yaml --checkpoint "$o/fp32/best.safetensors"
  for q in w8a8 w4a4_lsq; do
    $bin train "configs/quickstart_$q.yaml" --set output.dir="$o/$q" --set quant.init_from="$o/fp32/best.safetensors" \
      --set train.threads=2
    $bin compare-layers "configs/quickstart_$q.yaml" --checkpoint "$o/$q/best.safetensors" --images 0
    $bin export "configs/quickstart_$q.yaml" --checkpoint "$o/$q/best.safetensors" --out "$o/$q/export"
    $bin export "configs/quickstart_$q.yaml" --checkpoint "$o/$q/best.safetensors" --format onnx --out "$o/$q/model.onnx"
    $bin eval "configs/quickstart_$q.yaml" --checkpoint "$o/$q/export"
    $bin infer "$o/$q/export" data/samples/imagenette-mini/val/n03394916 --top 3 | head -4
  done
  for mode in int8_training.enabled integer_forward; do
    $bin train configs/quickstart_w8a8.yaml --set output.dir="$o/${mode%%.*}" --set quant.init_from="$o/fp32/best.safetensors" \
      --set train.threads=2 --set "quant.$mode=true" --set train.epochs=2
  done
}

for side in before after; do
  bin=$before; [ $side = after ] && bin=$after
  echo "== $side: $bin"
  pipeline "$bin" "$work/run" > "$work/$side.log" 2>&1
  mv "$work/run" "$work/$side"
done

mask() { grep -v "img/s\|ETA" "$1" | sed -E 's/[0-9.]+ s$/N s/; s/[0-9.]+ ms/N ms/g'; }
status=0
if diff <(mask "$work/before.log") <(mask "$work/after.log"); then
  echo "output: the same $(wc -l < "$work/before.log") lines (speeds and times masked)"
else
  echo "output: DIFFERS"; status=1
fi
python3 - "$work" <<'PY' || status=1
import json, os, struct, sys
work = sys.argv[1]
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
timed = {'metrics_csv_row', 'metrics_jsonl_row', 'metadata_sha256'}
bad = same_ckpt = same_bytes = 0
for root, _, files in os.walk(os.path.join(work, 'before')):
    for f in sorted(files):
        a = os.path.join(root, f); rel = os.path.relpath(a, os.path.join(work, 'before'))
        b = os.path.join(work, 'after', rel)
        if f in ('.lock',) or f.startswith('metrics.'):
            continue
        if not os.path.exists(b):
            print('missing after:', rel); bad += 1; continue
        if open(a, 'rb').read() == open(b, 'rb').read():
            same_bytes += 1; continue
        if not f.endswith('.safetensors'):
            print('differs:', rel); bad += 1; continue
        ha, da = load(a); hb, db = load(b)
        ma, mb = ha.pop('__metadata__', {}), hb.pop('__metadata__', {})
        keys = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k) and k not in timed)
        if ha != hb or da != db or keys:
            print('checkpoint differs:', rel, 'tensors' if (ha != hb or da != db) else '', keys); bad += 1
        else:
            same_ckpt += 1
print(f'files: {same_bytes} byte-identical, {same_ckpt} checkpoints with identical tensors and metadata '
      f'(but the epoch time and speed), {bad} different')
sys.exit(1 if bad else 0)
PY
exit $status
