#!/usr/bin/env python3
"""ONNX Runtime on an exported QDQ model against qat's integer model, on the
images `qat infer EXPORT DIR --save PREFIX` preprocessed and classified:

    .venv-onnx/bin/python bench/onnx_eval.py MODEL.onnx PREFIX [--threads 2] [--batch 64]

Labels come from the images' class folders (sorted names, as qat's
ImageFolder). Prints top-1 of both, their agreement and the largest logit
difference.
"""
import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def output_lsb(path):
    """Per class, the logits' LSB s_x s_w[c]: the scales of the two
    DequantizeLinear nodes feeding the node that writes `logits`."""
    g = onnx.load(path).graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    made_by = {o: n for n in g.node for o in n.output}
    node = made_by["logits"]
    while node.op_type == "Relu":
        node = made_by[node.input[0]]
    x_dq, w_dq = made_by[node.input[0]], made_by[node.input[1]]
    while x_dq.op_type != "DequantizeLinear":  # through Flatten, MaxPool, Relu, Reshape
        x_dq = made_by[x_dq.input[0]]
    return float(inits[x_dq.input[1]]) * inits[w_dq.input[1]].astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prefix")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    paths = open(a.prefix + ".paths.txt").read().split("\n")[:-1]
    n = len(paths)
    qat_logits = np.fromfile(a.prefix + ".logits.f32", dtype=np.float32).reshape(n, -1)
    x = np.memmap(a.prefix + ".inputs.f32", dtype=np.float32, mode="r")
    size = int(round((x.size // (3 * n)) ** 0.5))
    x = x.reshape(n, 3, size, size)
    classes = sorted({os.path.basename(os.path.dirname(p)) for p in paths})
    labels = np.array([classes.index(os.path.basename(os.path.dirname(p))) for p in paths])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(a.model, opts, providers=["CPUExecutionProvider"])
    ort_logits = np.concatenate([sess.run(None, {"input": np.ascontiguousarray(x[i:i + a.batch])})[0]
                                 for i in range(0, n, a.batch)])
    q, o = qat_logits.argmax(1), ort_logits.argmax(1)
    diff_lsb = np.abs(qat_logits.astype(np.float64) - ort_logits) / output_lsb(a.model)
    print(f"images {n}: qat integer top-1 {100 * (q == labels).mean():.2f}%, "
          f"ONNX Runtime top-1 {100 * (o == labels).mean():.2f}%, "
          f"same top-1 {100 * (q == o).mean():.2f}% ({int((q != o).sum())} differ), "
          f"logit difference: max {np.abs(qat_logits - ort_logits).max():.3g} (mean |logit| "
          f"{np.abs(qat_logits).mean():.3g}), max {diff_lsb.max():.3g} accumulator LSB (s_x s_w), "
          f"{100 * (diff_lsb > 0.5).mean():.3f}% of logits over 1/2 LSB")


if __name__ == "__main__":
    main()
