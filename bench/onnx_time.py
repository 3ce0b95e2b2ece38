#!/usr/bin/env python3
"""ONNX Runtime's speed on an exported model (qat's QDQ export), beside
`qat bench --infer` and bench/pytorch_int8_graph_infer.py: random input of
the given size, `--threads` intra-op threads, all graph optimisations on
(ORT fuses each DequantizeLinear -> Conv -> QuantizeLinear into its integer
QLinearConv kernels). Prints images per second, the median of --repeats
timed passes of --iters batches each.

    .venv-onnx/bin/python bench/onnx_time.py MODEL.onnx --res 128 --batch 32 --threads 2

(Its timing loop is pytorch_int8_infer_bench.py's time_infer over a session
instead of a module: that one imports torch, which the ONNX Runtime virtual
environment does not have.)
"""
import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=None, help="batches per timed pass (default: about 256 images)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(0).standard_normal((a.batch, 3, a.res, a.res)).astype(np.float32)
    iters = a.iters or max(2, 256 // a.batch)
    for _ in range(a.warmup):
        sess.run(None, {name: x})
    rates = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            sess.run(None, {name: x})
        rates.append(iters * a.batch / (time.perf_counter() - t0))
    print(f"onnxruntime {ort.__version__} {a.model} {a.res} px batch {a.batch}, {a.threads} threads")
    print(f"infer onnx: {statistics.median(rates):.1f} img/s")


if __name__ == "__main__":
    main()
