#!/bin/bash
# PTQ on Imagenette, one-pass (the build before two-pass calibration) and two-pass, alternated per setting.
# ONE_PASS: a qat built at 27032fa (one-pass calibration); TWO_PASS: one with two passes (34e686a and later).
cd "$(dirname "$0")/../../.."
ONE=${ONE_PASS:?set ONE_PASS to a qat built at 27032fa}
TWO=${TWO_PASS:-build/qat}
OUT=${OUT:-runs/ptq_two_pass}
mkdir -p $OUT
CK=runs/alexnet_fp32_imagenette/best.safetensors
lscpu | grep "Model name"
for setting in w8a8_tensorrt w8a8_default w4a4_default w4a4_all; do
  case $setting in
    w8a8_tensorrt) args="configs/alexnet_w8a8_imagenette.yaml --set quant.backend=tensorrt";;
    w8a8_default) args="configs/alexnet_w8a8_imagenette.yaml";;
    w4a4_default) args="configs/alexnet_w4a4_lsq_imagenette.yaml";;
    w4a4_all) args="configs/alexnet_w4a4_lsq_imagenette.yaml --set quant.overrides={}";;
  esac
  for build in one_pass two_pass; do
    bin=$ONE; [ $build = two_pass ] && bin=$TWO
    out=$OUT/${setting}_${build}
    rm -rf $out
    echo "=== $setting $build"
    $bin calibrate $args --checkpoint $CK --compare --out $out > $OUT/${setting}_${build}.log 2>&1
    echo "rc=$?"
    grep -E "integer model: val top-1|calibration passes|FP32" $OUT/${setting}_${build}.log | grep -v "^\[" | head -8
  done
done
echo ALL_DONE
