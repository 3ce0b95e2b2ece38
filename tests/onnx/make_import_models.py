#!/usr/bin/env python3
"""ONNX models for qat's import tests (tests/apps/test_onnx_import.cpp),
built with the onnx package's helper, and ONNX Runtime's outputs for them.

    make_import_models.py OUT_DIR

Writes into OUT_DIR, for each model NAME that qat must import:
  NAME.onnx, NAME.input.f32 (2 x 3 x 16 x 16 float32), NAME.output.f32
  (ONNX Runtime's logits, 2 x 10 float32);
and for each model that qat must refuse: refuse_WHAT.onnx (checked by
onnx.checker, so that each is a valid model qat declines, not a broken file).

  residual_bn   a training-mode export's shape: convs without bias, their
                weights named as a state dict (stem.weight, ...),
                BatchNormalization kept, a depthwise conv, Clip(0, 6) with its
                bounds as initializers, a residual Add, a Concat on channels,
                MaxPool, AveragePool (padding not counted), GlobalAveragePool,
                Flatten, Gemm (transB=1) with a bias.
  folded        an eval-mode export's shape: BN folded into conv biases,
                weights named onnx::Conv_N, Clip bounds from Constant nodes,
                Dropout and Identity, Reshape to (N, -1), MatMul + Add.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def init(name, *shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def positive(name, n):
    return numpy_helper.from_array((0.5 + rng.random(n)).astype(np.float32), name)


def model(nodes, inits, name, opset=13, check=True):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 16, 16])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 10])
    g = helper.make_graph(nodes, name, [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if check:  # (the refusals below that ONNX's own checker would refuse too are written unchecked)
        onnx.checker.check_model(m, full_check=True)
    return m


def bn(prefix, c, inp, out, inits):
    inits += [positive(prefix + ".weight", c), init(prefix + ".bias", c), init(prefix + ".running_mean", c),
              positive(prefix + ".running_var", c)]
    return helper.make_node("BatchNormalization", [inp] + [prefix + s for s in
                            (".weight", ".bias", ".running_mean", ".running_var")], [out],
                            name="/" + prefix.replace(".", "/") + "/BatchNormalization", epsilon=1e-5, momentum=0.9)


def residual_bn():
    i = []
    i += [init("stem.weight", 8, 3, 3, 3), init("block.dw.weight", 8, 1, 3, 3), init("block.pw.weight", 8, 8, 1, 1),
          init("fc.weight", 10, 16), init("fc.bias", 10),
          numpy_helper.from_array(np.array(0, np.float32), "zero"), numpy_helper.from_array(np.array(6, np.float32), "six")]
    n = [
        helper.make_node("Conv", ["x", "stem.weight"], ["c0"], name="/stem/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        bn("bn", 8, "c0", "b0", i),
        helper.make_node("Relu", ["b0"], ["r0"], name="/relu/Relu"),
        helper.make_node("Conv", ["r0", "block.dw.weight"], ["c1"], name="/block/dw/Conv", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], group=8),
        bn("block.bn1", 8, "c1", "b1", i),
        helper.make_node("Clip", ["b1", "zero", "six"], ["r1"], name="/block/act/Clip"),
        helper.make_node("Conv", ["r1", "block.pw.weight"], ["c2"], name="/block/pw/Conv", kernel_shape=[1, 1]),
        bn("block.bn2", 8, "c2", "b2", i),
        helper.make_node("Add", ["r0", "b2"], ["a"], name="/block/Add"),
        helper.make_node("Concat", ["a", "r0"], ["cat"], name="/Concat", axis=1),
        helper.make_node("MaxPool", ["cat"], ["p1"], name="/pool/MaxPool", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["p1"], ["p2"], name="/avg/AveragePool", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["p2"], ["g"], name="/gap/GlobalAveragePool"),
        helper.make_node("Flatten", ["g"], ["f"], name="/Flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm", transB=1),
    ]
    return model(n, i, "residual_bn")


def folded():
    i = [init("onnx::Conv_11", 16, 3, 3, 3), init("onnx::Conv_12", 16), init("onnx::Conv_13", 16, 1, 3, 3),
         init("onnx::Conv_14", 16), init("onnx::MatMul_20", 16, 10), init("classifier.bias", 10),
         numpy_helper.from_array(np.array([0, -1], np.int64), "flat_shape")]
    n = [
        helper.make_node("Constant", [], ["lo"], name="/Constant", value=numpy_helper.from_array(np.array(0, np.float32))),
        helper.make_node("Constant", [], ["hi"], name="/Constant_1", value=numpy_helper.from_array(np.array(6, np.float32))),
        helper.make_node("Conv", ["x", "onnx::Conv_11", "onnx::Conv_12"], ["c0"], name="/features/features.0/Conv",
                         kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c0", "lo", "hi"], ["r0"], name="/features/features.0/Clip"),
        helper.make_node("Conv", ["r0", "onnx::Conv_13", "onnx::Conv_14"], ["c1"], name="/features/features.1/Conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16),
        helper.make_node("Identity", ["c1"], ["id"], name="/Identity"),
        helper.make_node("Add", ["id", "r0"], ["a"], name="/features/features.1/Add"),
        helper.make_node("Relu", ["a"], ["r1"], name="/Relu"),
        helper.make_node("GlobalAveragePool", ["r1"], ["g"], name="/GlobalAveragePool"),
        helper.make_node("Reshape", ["g", "flat_shape"], ["f"], name="/Reshape"),
        helper.make_node("Dropout", ["f"], ["d"], name="/classifier/Dropout"),
        helper.make_node("MatMul", ["d", "onnx::MatMul_20"], ["mm"], name="/classifier/MatMul"),
        helper.make_node("Add", ["mm", "classifier.bias"], ["logits"], name="/classifier/Add"),
    ]
    return model(n, i, "folded")


def refusals():
    """(what, model) pairs: each a valid ONNX model with one thing qat declines."""
    def small(node, extra_inits=(), opset=13, check=True):
        i = [init("w", 10, 3, 3, 3)] + list(extra_inits)
        n = [helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node,
             helper.make_node("GlobalAveragePool", ["o"], ["g"], name="/gap"),
             helper.make_node("Flatten", ["g"], ["logits"], name="/flat")]
        return model(n, i, "refuse", opset, check)

    def int_gemm():  # a Gemm whose weight is int64 (qat imports float weights)
        n = [helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"], name="/gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="/flat"),
             helper.make_node("Gemm", ["f", "fcw"], ["logits"], name="/fc/Gemm", transB=1)]
        fcw = numpy_helper.from_array(np.ones((10, 10), np.int64), "fcw")
        return model(n, [init("w", 10, 3, 3, 3), fcw], "refuse", check=False)
    bn8 = [positive("s8", 8), init("b10", 10), init("m8", 8), positive("v8", 8)]

    def kernel_shape_5():  # kernel_shape 5x5 for a 3x3 weight
        m = small(helper.make_node("Relu", ["c"], ["o"], name="/act/Relu"), check=False)
        m.graph.node[0].attribute[0].ints[:] = [5, 5]
        return m

    def no_opset():
        m = small(helper.make_node("Relu", ["c"], ["o"], name="/act/Relu"))
        del m.opset_import[:]
        return m
    six = numpy_helper.from_array(np.array(4, np.float32), "four")
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    return {
        "op": small(helper.make_node("Sigmoid", ["c"], ["o"], name="/act/Sigmoid")),
        "clip": small(helper.make_node("Clip", ["c", "zero", "four"], ["o"], name="/act/Clip"), [zero, six]),
        "pads": small(helper.make_node("MaxPool", ["c"], ["o"], name="/pool/MaxPool", kernel_shape=[3, 3],
                                       pads=[0, 0, 1, 1])),
        "opset": small(helper.make_node("Relu", ["c"], ["o"], name="/act/Relu"), opset=9),
        "ceil": small(helper.make_node("MaxPool", ["c"], ["o"], name="/pool/MaxPool", kernel_shape=[2, 2],
                                       strides=[2, 2], ceil_mode=1)),
        "int_gemm": int_gemm(),
        "bn_lengths": small(helper.make_node("BatchNormalization", ["c", "s8", "b10", "m8", "v8"], ["o"],
                                             name="/bn/BatchNormalization"), bn8, check=False),
        "named_input": small(helper.make_node("Relu", ["c"], ["o"], name="input")),
        "kernel_shape": kernel_shape_5(),
        "dup_output": small(helper.make_node("Relu", ["c"], ["c"], name="/act/Relu"), check=False),
        "no_opset": no_opset(),
    }


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    for name, m in (("residual_bn", residual_bn()), ("folded", folded())):
        path = os.path.join(out, name + ".onnx")
        onnx.save(m, path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        y = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert y.shape == (2, 10), y.shape
        x.tofile(os.path.join(out, name + ".input.f32"))
        y.astype(np.float32).tofile(os.path.join(out, name + ".output.f32"))
    for what, m in refusals().items():
        onnx.save(m, os.path.join(out, "refuse_" + what + ".onnx"))


if __name__ == "__main__":
    main()
