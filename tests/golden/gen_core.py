#!/usr/bin/python3
"""Golden vectors for qat's core ops (forward and backward), made by PyTorch.

Run:  /usr/bin/python3 tests/golden/gen_core.py
Writes tests/golden/core_ops.safetensors (read by tests/core/test_golden_ops.cpp).

Every case stores, under "<case>.<name>":
  inputs and parameters (x, w, b, running_mean/var, target ...), the random
  upstream gradient gy, the output y and the gradient d<name> of every input
  or parameter that takes one (dx, dw, db).
Inputs are drawn in float32; the reference is then computed in float64 from
those exact float32 values and rounded to float32 once, so the golden values
are PyTorch's math without float32 accumulation error of their own.
Integer targets are stored as I32. The file is written by hand (no dependency
on the `safetensors` package): 8-byte LE header length, JSON header, raw bytes.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402
from golden_common import GoldenTensors  # noqa: E402
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core_ops.safetensors")

torch.manual_seed(20240611)
tensors = GoldenTensors()
put = tensors.put



def randn(*shape):
    return torch.randn(tuple(shape), dtype=torch.float32)


def leaf(t32):
    """float64 leaf holding exactly the float32 values of t32."""
    return t32.double().requires_grad_(True)


def run_case(case, inputs, fn, extra=None):
    """inputs: ordered dict name -> float32 tensor (all get gradients).
    fn(*float64 leaves) -> float64 output. Stores inputs, gy, y, d<name>."""
    leaves = {k: leaf(v) for k, v in inputs.items()}
    y = fn(**leaves)
    gy = randn(*y.shape)
    y.backward(gy.double())
    for k, v in inputs.items():
        put(f"{case}.{k}", v)
    put(f"{case}.gy", gy)
    put(f"{case}.y", y)
    for k, v in leaves.items():
        put(f"{case}.d{k}", v.grad)
    for k, v in (extra or {}).items():
        put(f"{case}.{k}", v)


# ---------------------------------------------------------------- conv2d
# (case, x shape, w shape, bias?, stride, padding, dilation, groups)
CONV = [
    ("conv_plain", (2, 3, 7, 7), (4, 3, 3, 3), True, (1, 1), (0, 0), (1, 1), 1),
    ("conv_s2p1", (2, 3, 8, 8), (4, 3, 3, 3), True, (2, 2), (1, 1), (1, 1), 1),
    # AlexNet's first layer (11x11, stride 4, padding 2) on a 31x31 image -> 7x7
    ("conv_alex1", (1, 3, 31, 31), (8, 3, 11, 11), True, (4, 4), (2, 2), (1, 1), 1),
    ("conv_dil2", (2, 3, 9, 9), (4, 3, 3, 3), True, (1, 1), (2, 2), (2, 2), 1),
    ("conv_g2", (2, 4, 6, 6), (6, 2, 3, 3), True, (1, 1), (1, 1), (1, 1), 2),
    ("conv_dw", (2, 4, 7, 7), (4, 1, 3, 3), True, (2, 2), (1, 1), (1, 1), 4),
    ("conv_1x1_bias", (2, 5, 4, 4), (6, 5, 1, 1), True, (1, 1), (0, 0), (1, 1), 1),
    ("conv_1x1_nobias", (2, 5, 4, 4), (6, 5, 1, 1), False, (1, 1), (0, 0), (1, 1), 1),
    ("conv_rect", (2, 3, 7, 8), (4, 3, 2, 3), True, (2, 1), (1, 0), (1, 1), 1),
    ("conv_nobias_s2", (2, 3, 6, 6), (4, 3, 3, 3), False, (2, 2), (0, 0), (1, 1), 1),
]
for case, xs, ws, has_b, stride, pad, dil, groups in CONV:
    ins = {"x": randn(*xs), "w": randn(*ws) * 0.3}
    if has_b:
        ins["b"] = randn(ws[0])

    def conv(x, w, b=None, stride=stride, pad=pad, dil=dil, groups=groups):
        return F.conv2d(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)

    params = torch.tensor([stride[0], stride[1], pad[0], pad[1], dil[0], dil[1], groups], dtype=torch.int32)
    run_case(case, ins, conv, extra={"params": params})

# ---------------------------------------------------------------- linear
run_case("linear_bias", {"x": randn(4, 5), "w": randn(3, 5), "b": randn(3)}, lambda x, w, b: F.linear(x, w, b))
run_case("linear_nobias", {"x": randn(4, 5), "w": randn(3, 5)}, lambda x, w: F.linear(x, w))

# ---------------------------------------------------------------- batch_norm
MOMENTUM, EPS = 0.1, 1e-5


def bn_case(case, xs, training, affine=True):
    c = xs[1]
    x = randn(*xs) * 2.0 + 0.5
    ins = {"x": x}
    if affine:
        ins["w"] = randn(c) * 0.5 + 1.0
        ins["b"] = randn(c)
    rm = randn(c) * 0.2
    rv = torch.rand(c) + 0.5
    rm64, rv64 = rm.double(), rv.double()  # F.batch_norm updates these in place

    def bn(x, w=None, b=None):
        return F.batch_norm(x, rm64, rv64, w, b, training=training, momentum=MOMENTUM, eps=EPS)

    run_case(case, ins, bn, extra={"running_mean": rm, "running_var": rv})
    if training:
        put(f"{case}.running_mean_new", rm64)
        put(f"{case}.running_var_new", rv64)


bn_case("bn4d_train", (3, 4, 5, 5), True)
bn_case("bn2d_train", (8, 6), True)
bn_case("bn4d_eval", (3, 4, 5, 5), False)
bn_case("bn2d_eval", (8, 6), False)
bn_case("bn4d_train_noaffine", (2, 3, 4, 4), True, affine=False)

# ---------------------------------------------------------------- pooling
# (case, x shape, kernel, stride, padding)
MAXPOOL = [
    ("maxpool_k3s2", (2, 3, 9, 9), (3, 3), (2, 2), (0, 0)),  # AlexNet
    ("maxpool_k3s2p1", (2, 3, 8, 8), (3, 3), (2, 2), (1, 1)),
    ("maxpool_k2s2", (2, 3, 8, 8), (2, 2), (2, 2), (0, 0)),
    ("maxpool_rect", (2, 2, 7, 9), (3, 2), (2, 1), (1, 0)),
]
for case, xs, k, s, p in MAXPOOL:
    run_case(case, {"x": randn(*xs)}, lambda x, k=k, s=s, p=p: F.max_pool2d(x, k, s, p),
             extra={"params": torch.tensor([*k, *s, *p], dtype=torch.int32)})

AVGPOOL = [
    ("avgpool_k3s2p1", (2, 3, 7, 7), (3, 3), (2, 2), (1, 1)),  # count_include_pad=True (default)
    ("avgpool_k2s2", (2, 3, 8, 8), (2, 2), (2, 2), (0, 0)),
    ("avgpool_rect", (2, 2, 7, 9), (3, 2), (2, 1), (1, 1)),
]
for case, xs, k, s, p in AVGPOOL:
    run_case(case, {"x": randn(*xs)}, lambda x, k=k, s=s, p=p: F.avg_pool2d(x, k, s, p),
             extra={"params": torch.tensor([*k, *s, *p], dtype=torch.int32)})

ADAPTIVE = [
    ("adaptive_7to3", (2, 3, 7, 7), (3, 3)),
    ("adaptive_5to3", (2, 3, 5, 5), (3, 3)),
    ("adaptive_3to6", (2, 3, 3, 3), (6, 6)),  # AlexNet's avgpool at 128 px input
    ("adaptive_rect", (2, 2, 5, 7), (3, 4)),
]
for case, xs, o in ADAPTIVE:
    run_case(case, {"x": randn(*xs)}, lambda x, o=o: F.adaptive_avg_pool2d(x, o),
             extra={"params": torch.tensor(list(o), dtype=torch.int32)})

# ---------------------------------------------------------------- losses
N, C = 6, 10
for case, ls in [("ce", 0.0), ("ce_ls01", 0.1)]:
    t = torch.randint(0, C, (N,), dtype=torch.int64)
    run_case(case, {"x": randn(N, C) * 2.0}, lambda x, t=t, ls=ls: F.cross_entropy(x, t, label_smoothing=ls),
             extra={"target": t.to(torch.int32), "label_smoothing": torch.tensor([ls])})

run_case("log_softmax", {"x": randn(4, 7) * 3.0}, lambda x: F.log_softmax(x, dim=1))

t = torch.randint(0, 7, (5,), dtype=torch.int64)
run_case("nll", {"x": F.log_softmax(randn(5, 7), dim=1)}, lambda x, t=t: F.nll_loss(x, t),
         extra={"target": t.to(torch.int32)})


# ---------------------------------------------------------------- write


write_safetensors(OUT, tensors, {"generator": "tests/golden/gen_core.py", "torch": torch.__version__,
                                 "reference_precision": "float64 from float32 inputs"})
print(f"wrote {OUT}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")
