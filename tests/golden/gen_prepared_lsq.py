#!/usr/bin/python3
"""Golden gradients of a prepared LSQ+ network, made by PyTorch.

Run:  /usr/bin/python3 tests/golden/gen_prepared_lsq.py
Writes tests/golden/prepared_lsq.safetensors (read by
tests/quant/sim/test_golden_prepared_lsq.cpp).

The network is Sequential(Linear(6,5), ReLU, Linear(5,4), ReLU, Linear(4,3))
as qat's prepare() leaves it under `quant: {method: lsq_plus, bits: 4}` on the
default backend (configs/backends/default.yaml):
  "0": input  LSQ+ (unsigned 4-bit, affine: step and offset, one each)
       weight LSQ  (signed 4-bit, symmetric, per output channel: no offset)
       linear, ReLU, output LSQ+ (unsigned 4-bit: step, offset)
  "2": weight LSQ, linear, ReLU, output LSQ+
  "4": weight LSQ, linear (float logits)
Each quantizer is written the way the LSQ paper's appendix code writes it
(Esser et al., ICLR 2020): the step through a gradient-scale pass-through,
v / s, F.hardtanh(v, Q_N, Q_P) (PyTorch's kernel decides which elements are
clipped: its gradient is 0 where v <= Q_N or v >= Q_P), round through a
straight-through pass, times s; LSQ+ (Bhalgat et al., CVPR-W 2020) subtracts
the offset before and adds it after, the offset through the same gradient
scale. N in the gradient scale 1/sqrt(N Q_P) is what qat uses (docs/math):
the weights of one output channel, or the features of one example.
Everything runs in float64 from float32 values; the loss is sum(y * gy).

Stored (F32):
  x, gy                     input (8,6) and upstream gradient (8,3)
  init.<name>               the parameters qat loads: <layer>.weight, .bias,
                            <quantizer>.step, <quantizer>.offset (LSQ+ only)
  grad.<name>               d loss / d parameter, for every init.<name>
  y, dx                     the logits and d loss / d x
Inputs are drawn until every quantized value lies at least MARGIN away from
a rounding or clipping boundary, so float32 (qat) and float64 (here) decide
every rounding the same way.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402
from golden_common import GoldenTensors  # noqa: E402
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prepared_lsq.safetensors")
BITS = 4
QN_W, QP_W = -(1 << (BITS - 1)), (1 << (BITS - 1)) - 1
QN_A, QP_A = 0, (1 << BITS) - 1
MARGIN = 2e-3
SIZES = [(6, 5), (5, 4), (4, 3)]
LAYERS = ["0", "2", "4"]


def grad_scaled(p, g):
    """Value p, gradient g * dL/dp."""
    return (p - p * g).detach() + p * g


def round_pass(v):
    return (v.round() - v).detach() + v


class Quantizer:
    """One LSQ / LSQ+ quantizer; records the pre-rounding values it saw."""

    def __init__(self, step, offset, qn, qp, per_channel):
        self.step = torch.tensor(step, dtype=torch.float64, requires_grad=True)
        self.offset = None if offset is None else torch.tensor(offset, dtype=torch.float64, requires_grad=True)
        self.qn, self.qp, self.per_channel = qn, qp, per_channel
        self.seen = []

    def __call__(self, v):
        n = v[0].numel()  # weights: one output channel (rows); activations: one example
        g = 1.0 / np.sqrt(n * self.qp)
        s = grad_scaled(self.step, g)
        s = s.reshape(-1, 1) if self.per_channel else s
        b = 0.0
        if self.offset is not None:
            b = grad_scaled(self.offset, g)
        t = (v - b) / s
        self.seen.append(t.detach().clone())
        return round_pass(F.hardtanh(t, self.qn, self.qp)) * s + b

    def margin(self):
        t = torch.cat([u.reshape(-1) for u in self.seen])
        to_half = (t - t.floor() - 0.5).abs()
        to_clip = torch.minimum((t - self.qn).abs(), (t - self.qp).abs())
        return float(torch.minimum(to_half, to_clip).min())


def make_case(seed):
    torch.manual_seed(seed)
    params = {}
    x = torch.randn(8, 6) * 1.5 + 0.3
    gy = torch.randn(8, 3)
    quantizers = {}
    # Input: LSQ+ over [min, max] of a typical batch, then moved off the data.
    quantizers["0.input_fake_quant"] = Quantizer([0.37], [-2.6], QN_A, QP_A, False)
    for (fin, fout), name in zip(SIZES, LAYERS):
        w = torch.randn(fout, fin) * 0.6
        b = torch.randn(fout) * 0.2
        params[f"{name}.weight"] = w
        params[f"{name}.bias"] = b
        step = (2.0 * w.abs().mean(dim=1) / np.sqrt(QP_W)) * (0.25 + 0.35 * torch.rand(fout))  # some weights clip
        quantizers[f"{name}.weight_fake_quant"] = Quantizer(step.tolist(), None, QN_W, QP_W, True)
    quantizers["0.activation_post_process"] = Quantizer([0.11], [-0.07], QN_A, QP_A, False)
    quantizers["2.activation_post_process"] = Quantizer([0.09], [-0.05], QN_A, QP_A, False)
    # Every float32 value qat loads, and its float64 twin here.
    w64 = {k: v.float().double().requires_grad_(True) for k, v in params.items()}
    for q in quantizers.values():
        q.step.data = q.step.data.float().double()
        if q.offset is not None:
            q.offset.data = q.offset.data.float().double()
    x64 = x.float().double().requires_grad_(True)
    h = quantizers["0.input_fake_quant"](x64)
    for i, name in enumerate(LAYERS):
        h = F.linear(h, quantizers[f"{name}.weight_fake_quant"](w64[f"{name}.weight"]), w64[f"{name}.bias"])
        if i + 1 < len(LAYERS):
            h = quantizers[f"{name}.activation_post_process"](F.relu(h))
    y = h
    y.backward(gy.double())
    return x, gy, params, w64, quantizers, x64, y


def main():
    for seed in range(1000):
        x, gy, params, w64, quantizers, x64, y = make_case(seed)
        worst = min(q.margin() for q in quantizers.values())
        if worst >= MARGIN:
            break
    else:
        sys.exit("no seed keeps every value away from the rounding boundaries")
    out = GoldenTensors()
    out.put("x", x.float())
    out.put("gy", gy.float())
    for name in params:
        out.put(f"init.{name}", w64[name].detach().float())
    for qname, q in quantizers.items():
        out.put(f"init.{qname}.step", q.step.detach().float())
        if q.offset is not None:
            out.put(f"init.{qname}.offset", q.offset.detach().float())
    for name in params:
        out.put(f"grad.{name}", w64[name].grad.float())
    for qname, q in quantizers.items():
        out.put(f"grad.{qname}.step", q.step.grad.float())
        if q.offset is not None:
            out.put(f"grad.{qname}.offset", q.offset.grad.float())
    out.put("y", y.detach().float())
    out.put("dx", x64.grad.float())
    write_safetensors(OUT, out, {"generator": "tests/golden/gen_prepared_lsq.py", "torch": torch.__version__,
                                 "seed": str(seed), "margin": f"{worst:.4g}"})
    print(f"wrote {OUT}: seed {seed}, smallest distance to a boundary {worst:.4g}")


if __name__ == "__main__":
    main()
