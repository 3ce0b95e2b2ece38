#!/usr/bin/env python3
"""PyTorch side of `qat bench --infer --model resnet18|mobilenet_v2`: inference
of torchvision's quantizable ResNet-18 / MobileNetV2 in FP32 (eval mode) and
after eager-mode post-training INT8 quantization (the model's own fuse_model:
Conv+BN(+ReLU) fused; the engine's default qconfig: per-channel int8 weights,
uint8 activations with histogram observers, calibrated on a few random
batches), same input size, batch and threads. Debian's python3-torch 1.13 has
no FBGEMM: the engine is oneDNN (x86 int8 kernels).
    /usr/bin/python3 bench/pytorch_int8_graph_infer.py --model resnet18 --res 128 --batch 32 --threads 2
"""
import argparse
import copy
import torch
from torchvision.models import quantization as qm

from pytorch_int8_infer_bench import calibrate_and_convert, time_infer


def fp32_model(name, classes):
    make = {"resnet18": qm.resnet18, "mobilenet_v2": qm.mobilenet_v2}[name]
    return make(weights=None, quantize=False, num_classes=classes).eval()


def int8_model(fp32, engine, res, batch, calib):
    torch.backends.quantized.engine = engine
    model = copy.deepcopy(fp32).eval()
    model.fuse_model()
    return calibrate_and_convert(model, engine, res, batch, calib)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["resnet18", "mobilenet_v2"], required=True)
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=None, help="passes per repeat (default: about 256 images)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calib", type=int, default=4, help="random calibration batches")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--engine", default="onednn", choices=["onednn", "qnnpack"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    iters = a.iters or max(2, 256 // a.batch)
    fp32 = fp32_model(a.model, a.classes)
    x = torch.randn(a.batch, 3, a.res, a.res)
    int8 = int8_model(fp32, a.engine, a.res, min(a.batch, 8), a.calib)
    f = time_infer(fp32, x, iters, a.warmup, a.repeats)
    q = time_infer(int8, x, iters, a.warmup, a.repeats)
    print(f"pytorch {torch.__version__} {a.model} {a.res} px batch {a.batch}, {a.threads} threads, engine {a.engine}")
    print(f"infer fp32: {f:.1f} img/s")
    print(f"infer int8: {q:.1f} img/s  (int8/fp32 {q / f:.2f})")


if __name__ == "__main__":
    main()
