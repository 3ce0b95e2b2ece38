#!/usr/bin/env bash
# Issue 39's hostile cases against the built qat binary, on the embedded
# sample: ordinary mistakes and interruptions around calibrate, sensitivity,
# export and checkpoints. Prints one line per case (ok / LOST / MIXED /
# WRONG) and the counts; exits non-zero if any file was lost, any mixed
# folder was accepted or any message missed what it must say. Not in CI
# (ctest holds the same cases one by one); run it after changing a writer:
#   bash scripts/hostile_outputs.sh [build/qat]
set -uo pipefail
cd "$(dirname "$0")/.."
qat=$(realpath "${1:-build/qat}")
w=$(mktemp -d /tmp/qat_hostile.XXXXXX)
trap 'rm -rf "$w"' EXIT
sample=$PWD/data/samples/imagenette-mini
lost=0 mixed=0 wrong=0 n=0
say() { n=$((n + 1)); echo "$1 $2"; case $1 in LOST) lost=$((lost + 1)) ;; MIXED) mixed=$((mixed + 1)) ;; WRONG) wrong=$((wrong + 1)) ;; esac; }
# expect_refusal NAME TEXT CMD...: a non-zero exit whose output holds TEXT.
expect_refusal() {
  local name=$1 text=$2; shift 2
  if "$@" > "$w/out.log" 2>&1; then say WRONG "$name (exit 0)"; elif grep -qF -- "$text" "$w/out.log"; then say ok "$name"; else say WRONG "$name: $(tail -n 1 "$w/out.log")"; fi
}
digest() { (cd "$1" 2>/dev/null && sha256sum -- * 2>/dev/null | sort) | sha256sum | cut -c1-16; }
cfg() {  # cfg NAME QUANT-YAML RUN-DIR
  printf 'model: {name: small_cnn, num_classes: 10}\ndata: {train: %s/train, val: %s/val, image_size: 32, resize: 36}\ntrain: {epochs: 1, batch_size: 16, seed: 3, threads: 1, max_steps_per_epoch: 4, lr: 0.05}\n%soutput: {dir: %s}\n' \
    "$sample" "$sample" "$2" "$w/$3" > "$w/$1"
}
cfg fp32.yaml "" fp32
cfg q.yaml "quant: {enabled: true, backend: tensorrt, method: minmax}
" q
cfg int8.yaml "quant: {enabled: true, int8_training: {enabled: true, keep_float: [fc]}}
" int8
"$qat" train "$w/fp32.yaml" > /dev/null 2>&1 && "$qat" train "$w/q.yaml" > /dev/null 2>&1 && "$qat" train "$w/int8.yaml" > /dev/null 2>&1 || { echo "setup failed"; exit 2; }
fp32=$w/fp32/best.safetensors
cal() { "$qat" calibrate "$w/q.yaml" --checkpoint "$fp32" --images 48 "$@"; }
cal --out "$w/OUT" > /dev/null 2>&1 || { echo "setup failed"; exit 2; }
old=$(digest "$w/OUT")

# 1. sensitivity --out holding the user's folder
mkdir -p "$w/U/finetune" && echo thesis > "$w/U/finetune/thesis.tex"
"$qat" sensitivity "$w/q.yaml" --checkpoint "$fp32" --images 20 --calib-images 16 --finetune-steps 1 --out "$w/U" > /dev/null 2>&1
[ -f "$w/U/finetune/thesis.tex" ] && say ok "sensitivity --out U with U/finetune of the user's" || say LOST "U/finetune removed"
# 2. --cache onto each own output
for f in calibrated.safetensors config.yaml; do
  cal --out "$w/OUT" --cache "$w/OUT/$f" > /dev/null 2>&1
  [ "$(digest "$w/OUT")" = "$old" ] && say ok "--cache OUT/$f" || say LOST "--cache OUT/$f changed OUT"
done
# 3. stopped at moments through a calibration over the old one (other preprocessing)
pair() { echo "$(sha256sum < "$1/config.yaml" | cut -c1-16) $(sha256sum < "$1/calibrated.safetensors" | cut -c1-16)"; }
old_pair=$(pair "$w/OUT")
cal --out "$w/NEW" --compare --set data.resize=40 > /dev/null 2>&1
new_pair="$(sed "s#$w/NEW#$w/OUT#" "$w/NEW/config.yaml" | sha256sum | cut -c1-16) $(sha256sum < "$w/NEW/calibrated.safetensors" | cut -c1-16)"
for delay in 0.02 0.05 0.1 0.15 0.2 0.3 0.4 0.6; do
  for sig in TERM KILL; do
    cal --out "$w/OUT" --compare --set data.resize=40 > /dev/null 2>&1 & pid=$!
    sleep "$delay"; kill -s "$sig" "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
    now=$(pair "$w/OUT")
    if [ "$now" = "$old_pair" ] || [ "$now" = "$new_pair" ]; then say ok "SIG$sig after ${delay}s ($([ "$now" = "$old_pair" ] && echo old || echo new) folder)"; else say MIXED "SIG$sig after ${delay}s"; fi
  done
done
# 4. two calibrates into one folder at once: each finishes or is refused; the folder is whole
rm -rf "$w/C"
cal --out "$w/C" > "$w/c1.log" 2>&1 & p1=$!
cal --out "$w/C" > "$w/c2.log" 2>&1 & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
if { [ $r1 = 0 ] || grep -q "being written by another qat command" "$w/c1.log"; } && { [ $r2 = 0 ] || grep -q "being written by another qat command" "$w/c2.log"; } && "$qat" eval "$w/C/config.yaml" --checkpoint "$w/C/calibrated.safetensors" > /dev/null 2>&1; then say ok "two calibrates at once (exits $r1, $r2)"; else say MIXED "two calibrates at once"; fi
# 5. more fine-tune steps than the training has
expect_refusal "--finetune-steps 99999999999" "is more than the config's whole training" \
  "$qat" sensitivity "$w/q.yaml" --checkpoint "$fp32" --finetune-steps 99999999999 --out "$w/S5"
# 6. the record's ranges and the cache's scale edited together
cp "$w/OUT/calibration.cache" "$w/e.cache" && cp "$w/OUT/calibration.cache.source.yaml" "$w/e.cache.source.yaml"
sed -i 's/\(features.4.activation_post_process: \[[^,]*, \)[^]]*/\11000/' "$w/e.cache.source.yaml"
expect_refusal "record and cache edited together" "was edited" cal --out "$w/S6" --cache "$w/e.cache"
# Messages
expect_refusal "a refused calibrate leaves no --out" "does not exist" cal --out "$w/R" --cache "$w/no/such/x.cache"
[ -e "$w/R" ] && say WRONG "refused calibrate left $w/R"
expect_refusal "QAT checkpoint as init_from" "is a QAT checkpoint, not a float (FP32) checkpoint or a calibration" \
  "$qat" train "$w/q.yaml" --set "quant.init_from=$w/q/best.safetensors" --set "output.dir=$w/x"
"$qat" export "$w/OUT/config.yaml" --checkpoint "$w/OUT/calibrated.safetensors" --out "$w/EXP" > /dev/null 2>&1
expect_refusal "export folder as checkpoint" "is an export folder (qat export)" "$qat" calibrate "$w/q.yaml" --checkpoint "$w/EXP" --out "$w/S7"
"$qat" export "$w/OUT/config.yaml" --checkpoint "$w/OUT/calibrated.safetensors" --format onnx --out "$w/m.onnx" > /dev/null 2>&1 &&
  expect_refusal "ONNX file as checkpoint" "it is an ONNX model" "$qat" calibrate "$w/q.yaml" --checkpoint "$w/m.onnx" --out "$w/S8"
expect_refusal "cache as checkpoint" "it is text beginning \"TRT-8601-" "$qat" calibrate "$w/q.yaml" --checkpoint "$w/OUT/calibration.cache" --out "$w/S9"
expect_refusal "another model's checkpoint" "holds a small_cnn model with 10 classes, but config" \
  "$qat" eval "$w/q.yaml" --checkpoint "$w/q/best.safetensors" --set model.num_classes=5
expect_refusal "--resume of INT8 training with it off" "is a checkpoint of INT8 training" \
  "$qat" train "$w/int8.yaml" --resume "$w/int8" --set quant.int8_training.enabled=false
cfg kf.yaml "quant: {enabled: true, int8_training: {enabled: true, keep_float: [features.99]}}
" kf
expect_refusal "keep_float: [features.99]" "kf.yaml, line 4" "$qat" train "$w/kf.yaml"
mkdir -p "$w/imgs" && cp "$(find "$sample/val" -name '*.jpg' | head -n 1)" "$w/imgs/a.jpg" && ln -s "$w/imgs/gone.jpg" "$w/imgs/d.jpg"
expect_refusal "dangling .jpg in qat infer" "d.jpg" "$qat" infer "$w/EXP" "$w/imgs"
echo "$n cases: $lost files lost, $mixed mixed folders accepted, $wrong wrong or missing messages"
[ $lost = 0 ] && [ $mixed = 0 ] && [ $wrong = 0 ]
