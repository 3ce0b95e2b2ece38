#!/usr/bin/python3
"""Golden vectors for qat's QAT Conv+BN(+ReLU) module (quant::QatConv2d with a
BatchNorm2d), made by PyTorch's torch.nn.intrinsic.qat.ConvBn2d / ConvBnReLU2d
(torch.ao.nn.intrinsic.qat in later releases; 1.13 keeps it under torch.nn),
i.e. the `_forward_approximate` folding:
    sf = bn.weight / sqrt(running_var + eps)
    y  = bn(conv(x, weight_fake_quant(w * sf)) / sf + conv_bias)

Run:  /usr/bin/python3 tests/golden/gen_qat_convbn.py
Writes tests/golden/qat_convbn.safetensors (read by tests/quant/sim/test_golden_qat_convbn.cpp).

Weight fake quant (no activation fake quant: the fused modules have none):
    FakeQuantize(observer=MovingAveragePerChannelMinMaxObserver, dtype=qint8,
                 qscheme=per_channel_symmetric, quant_min=-128, quant_max=127,
                 reduce_range=False, ch_axis=0, averaging_constant=0.01)
  = qat QuantSpec{bits 8, signed, symmetric, per_channel, axis 0, not narrow},
    method moving_average, averaging constant 0.01, clipped STE.

Per case "<case>" (convbn: with conv bias; convbnrelu: without, stride 2):
  params (i32): [in, out, k, stride, pad, has_bias, relu, steps]
  init.weight, init.bias (if any), init.bn_weight, init.bn_bias, init.bn_rm, init.bn_rv
  s<i>.* for steps i = 0..2, each a training-mode forward + backward of y with
    upstream gradient gy (no optimizer step; gradients zeroed in between):
    steps 0, 1 normalise with batch statistics (running stats update, momentum 0.1);
    step 2 runs after freeze_bn_stats() (still training: the observer still
    updates; BN uses the running statistics and leaves them alone).
      x, gy, y, dx, dweight, dbias (if any), dbn_weight, dbn_bias,
      wq (the fake-quantized folded weight the conv used), wscale (its per-channel scale),
      obs_min, obs_max (observer state after the step), rm, rv (running stats after the step)
  eval.x, eval.y: one forward after eval() with the observer disabled (qat's
    FakeQuantizer does not observe in eval; PyTorch's FakeQuantize observes
    whenever observer_enabled is set, training or not), and eval.y_observing:
    the same forward with PyTorch's observer left on (for the record only).

Initial running_var is chosen so that running_var + eps is exactly 4^k in
float32 (std a power of two): then bn.weight / std (PyTorch) and
bn.weight * (1 / std) (qat) are the same float, and so is the folded weight
in step 0, where the moving-average observer's max equals the current max
exactly and the extreme element of each channel sits at |w_fold| / scale ~ 127.5,
a rounding tie decided by the last bit. In later steps running_var is arbitrary
(sf may differ by an ulp) but the observer's max is a moving average, so no
element is near a tie.

The file is written by hand (no dependency on the `safetensors` package), as gen_quant.py.
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402
from golden_common import GoldenTensors  # noqa: E402
import torch
import torch.ao.quantization as tq
import torch.nn.intrinsic.qat as nniqat

warnings.filterwarnings("ignore")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qat_convbn.safetensors")

torch.manual_seed(20240613)
tensors = GoldenTensors()
put = tensors.put



WEIGHT_FQ = tq.FakeQuantize.with_args(observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128,
                                      quant_max=127, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                      reduce_range=False, ch_axis=0, averaging_constant=0.01)
QCONFIG = tq.QConfig(activation=tq.default_fake_quant, weight=WEIGHT_FQ)  # activation: unused by ConvBn2d
EPS = np.float32(1e-5)


def exact_running_var(out):
    """running_var with running_var + eps == 4^k exactly in float32 (k in -1..2)."""
    ks = torch.randint(-1, 3, (out,))
    rv = []
    for k in ks.tolist():
        target = np.float32(4.0 ** k)
        v = np.float32(target - EPS)
        for _ in range(4):  # nudge until the float32 sum lands on the target
            s = np.float32(v + EPS)
            if s == target:
                break
            v = np.nextafter(v, np.float32(np.inf) if s < target else np.float32(-np.inf))
        assert np.float32(v + EPS) == target
        rv.append(v)
    return torch.tensor(np.array(rv, dtype=np.float32))


# (case, class, in, out, k, stride, pad, bias, N, H, W)
CASES = [
    ("convbn", nniqat.ConvBn2d, 3, 6, 3, 1, 1, True, 4, 7, 7),
    ("convbnrelu", nniqat.ConvBnReLU2d, 4, 5, 3, 2, 1, False, 3, 8, 8),
]
STEPS = 3
FREEZE_AT = 2

for case, cls, cin, cout, k, stride, pad, bias, N, H, W in CASES:
    m = cls(cin, cout, k, stride=stride, padding=pad, bias=bias, qconfig=QCONFIG)
    fq = m.weight_fake_quant
    assert fq.quant_min == -128 and fq.quant_max == 127 and fq.ch_axis == 0
    assert fq.activation_post_process.reduce_range is False
    assert fq.activation_post_process.averaging_constant == 0.01
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape) * 0.3)
        if bias:
            m.bias.copy_(torch.randn(cout) * 0.5)
        g = torch.randn(cout) * 0.8 + 0.6
        g[1] = -abs(g[1]) - 0.3  # a negative gamma: the folded weight flips sign
        m.bn.weight.copy_(g)
        m.bn.bias.copy_(torch.randn(cout) * 0.5)
        m.bn.running_mean.copy_(torch.randn(cout) * 0.7)
        m.bn.running_var.copy_(exact_running_var(cout))
    assert m.bn.eps == 1e-5 and m.bn.momentum == 0.1
    c = case
    put(f"{c}.params", np.array([cin, cout, k, stride, pad, bias, cls is nniqat.ConvBnReLU2d, STEPS], dtype=np.int32))
    put(f"{c}.init.weight", m.weight)
    if bias:
        put(f"{c}.init.bias", m.bias)
    put(f"{c}.init.bn_weight", m.bn.weight)
    put(f"{c}.init.bn_bias", m.bn.bias)
    put(f"{c}.init.bn_rm", m.bn.running_mean)
    put(f"{c}.init.bn_rv", m.bn.running_var)

    captured = {}
    fq.register_forward_hook(lambda mod, inp, out: captured.__setitem__("wq", out.detach().clone()))

    m.train()
    for i in range(STEPS):
        if i == FREEZE_AT:
            m.freeze_bn_stats()
        x = (torch.randn(N, cin, H, W) * (1.0 + 0.3 * i) + 0.2 * i).requires_grad_(True)
        for p in m.parameters():
            p.grad = None
        y = m(x)
        gy = torch.randn(y.shape)
        y.backward(gy)
        s = f"{c}.s{i}"
        put(f"{s}.x", x)
        put(f"{s}.gy", gy)
        put(f"{s}.y", y)
        put(f"{s}.dx", x.grad)
        put(f"{s}.dweight", m.weight.grad)
        if bias:
            put(f"{s}.dbias", m.bias.grad)
        put(f"{s}.dbn_weight", m.bn.weight.grad)
        put(f"{s}.dbn_bias", m.bn.bias.grad)
        put(f"{s}.wq", captured["wq"])
        put(f"{s}.wscale", fq.scale)
        assert torch.all(fq.zero_point == 0)
        put(f"{s}.obs_min", fq.activation_post_process.min_val)
        put(f"{s}.obs_max", fq.activation_post_process.max_val)
        put(f"{s}.rm", m.bn.running_mean)
        put(f"{s}.rv", m.bn.running_var)

    m.eval()
    x = torch.randn(N, cin, H, W)
    m.apply(tq.disable_observer)
    with torch.no_grad():
        y = m(x)
    m.apply(tq.enable_observer)
    with torch.no_grad():
        y_obs = m(x)
    put(f"{c}.eval.x", x)
    put(f"{c}.eval.y", y)
    put(f"{c}.eval.y_observing", y_obs)




write_safetensors(OUT, tensors, {"generator": "tests/golden/gen_qat_convbn.py", "torch": torch.__version__,
                                 "reference": "torch.nn.intrinsic.qat.ConvBn2d/ConvBnReLU2d _forward_approximate"})
print(f"wrote {OUT}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")
