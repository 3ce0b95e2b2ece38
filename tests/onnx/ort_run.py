#!/usr/bin/env python3
"""Runs an exported ONNX model in ONNX Runtime for qat's tests and benchmarks.

    ort_run.py MODEL.onnx INPUT.f32 N C H W OUTPUT.f32 [--threads T] [--bench STEPS]

Checks the file with onnx.checker first (full check), reads the input as raw
float32 (N, C, H, W), writes the logits as raw float32. With --bench, also
times STEPS runs on the input after 3 warm-up runs and prints
`ort: <img/s> img/s (<ms> ms/batch, median of STEPS)`.
"""
import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("shape", nargs=4, type=int)
    ap.add_argument("output")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bench", type=int, default=0)
    a = ap.parse_args()
    onnx.checker.check_model(onnx.load(a.model), full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = a.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(a.model, opts, providers=["CPUExecutionProvider"])
    x = np.fromfile(a.input, dtype=np.float32).reshape(a.shape)
    y = sess.run(None, {"input": x})[0]
    y.astype(np.float32).tofile(a.output)
    if a.bench:
        for _ in range(3):
            sess.run(None, {"input": x})
        times = []
        for _ in range(a.bench):
            t0 = time.perf_counter()
            sess.run(None, {"input": x})
            times.append(time.perf_counter() - t0)
        med = float(np.median(times))
        print(f"ort: {a.shape[0] / med:.1f} img/s ({1000 * med:.2f} ms/batch, median of {a.bench})")


if __name__ == "__main__":
    main()
