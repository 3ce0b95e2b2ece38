#!/usr/bin/env python3
"""PyTorch side of `qat bench --infer`: inference of the AlexNet-BN network
in FP32 (eval mode) and after eager-mode post-training INT8 quantization with
the fbgemm backend (Conv+BN+ReLU and Linear+ReLU fused, default fbgemm
qconfig: per-channel int8 weights, uint8 activations with histogram observers,
calibrated on a few random batches), same input, batch and threads.
    /usr/bin/python3 bench/pytorch_int8_infer_bench.py --res 128 --batch 32 --threads 2

Debian's python3-torch 1.13.1 is built without FBGEMM (supported engines:
qnnpack, onednn). With the default --engine auto the script then falls back to
onednn (x86 oneDNN kernels, per-channel int8 weights, full-range uint8
activations) and says so in the header line and on stderr; pass --engine to
pick one explicitly.
"""
import argparse
import copy
import statistics
import sys
import time

import torch
import torch.ao.quantization as tq

from pytorch_train_bench import alexnet_bn
from pytorch_qat_bench import Wrapped, fuse as fuse_groups


def fuse(net):
    # eval-mode fusion: BN folded into the conv, ReLU fused (ConvReLU2d / LinearReLU)
    return fuse_groups(net, tq.fuse_modules)


def pick_engine(requested):
    supported = torch.backends.quantized.supported_engines
    if requested != "auto":
        if requested not in supported:
            sys.exit(f"quantized engine {requested} not supported by this torch build (supported: {supported})")
        return requested
    for e in ("fbgemm", "onednn", "qnnpack"):
        if e in supported:
            if e != "fbgemm":
                print(f"warning: this torch build has no fbgemm (supported: {supported}); using {e}",
                      file=sys.stderr)
            return e
    sys.exit(f"no quantized engine available (supported: {supported})")


def calibrate_and_convert(model, engine, res, batch, calib):
    """Eager post-training INT8 of a fused eval-mode model: the engine's
    default qconfig, `calib` random batches, converted in place."""
    model.qconfig = tq.get_default_qconfig(engine)
    tq.prepare(model, inplace=True)
    with torch.no_grad():
        for _ in range(calib):
            model(torch.randn(batch, 3, res, res))
    tq.convert(model, inplace=True)
    return model


def int8_model(fp32_model, engine, res, batch, calib):
    model = Wrapped(fuse(copy.deepcopy(fp32_model).eval())).eval()
    return calibrate_and_convert(model, engine, res, batch, calib)


def time_infer(model, x, iters, warmup, repeats):
    """Median images/s over `repeats` runs of `iters` forward passes."""
    rates = []
    with torch.no_grad():
        for _ in range(warmup):
            model(x)
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                model(x)
            rates.append(iters * x.shape[0] / (time.perf_counter() - t0))
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=None,
                    help="timed forward passes per repeat (default: about 64 images, at least 4)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calib", type=int, default=4, help="random calibration batches (of 8 images)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--engine", default="auto", choices=["auto", "fbgemm", "onednn", "qnnpack"],
                    help="quantized engine and its default qconfig (auto: fbgemm if built in, else onednn)")
    a = ap.parse_args()
    iters = a.iters if a.iters is not None else max(4, 64 // a.batch)
    torch.set_num_threads(a.threads)
    engine = pick_engine(a.engine)
    torch.backends.quantized.engine = engine
    torch.manual_seed(0)
    x = torch.randn(a.batch, 3, a.res, a.res)
    fp32_model = alexnet_bn(a.classes).eval()
    q_model = int8_model(fp32_model, engine, a.res, 8, a.calib)
    print(f"pytorch {torch.__version__}, {torch.get_num_threads()} threads, {a.res}x{a.res}, batch {a.batch}, "
          f"quantized engine {torch.backends.quantized.engine}"
          f"{'' if 'fbgemm' in torch.backends.quantized.supported_engines else ' (no fbgemm in this build)'}, {iters} iters x {a.repeats} repeats")
    fp32 = time_infer(fp32_model, x, iters, a.warmup, a.repeats)
    int8 = time_infer(q_model, x, iters, a.warmup, a.repeats)
    print(f"pytorch infer fp32: {fp32:.1f} img/s")
    print(f"pytorch infer int8: {int8:.1f} img/s")


if __name__ == "__main__":
    main()
