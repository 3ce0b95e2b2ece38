#!/usr/bin/python3
"""Golden vectors for qat's fake quantization and observers, made by PyTorch.

Run:  /usr/bin/python3 tests/golden/gen_quant.py
Writes tests/golden/quant_ops.safetensors (read by tests/quant/sim/test_fake_quant.cpp
and tests/quant/observe/test_minmax.cpp).

Fake quantization ("fq_<case>.<name>"): PyTorch's own float32 kernels
(torch.fake_quantize_per_tensor_affine / fake_quantize_per_channel_affine),
which qat must match bit for bit:
  x, scale (f32, (1) or (C)), zero_point (i32), gy (upstream gradient),
  y (forward), dx (backward: gy * mask), params (i32):
  [bits, is_signed, narrow_range, per_channel, axis, qmin, qmax].
Inputs mix exact ties (x = (k + 0.5) * s with s a power of two, so x / s is
exactly half-way), the grid k * s, the neighbours of ties one float ulp away,
random values, values far outside the range (|x / s| < 2^62: beyond, PyTorch
casts to int64 with undefined behaviour), zeros and -0.0.

Observers ("obs_<case>.<name>"): torch.ao.quantization observers fed four
batches b0..b3; after batch i: min_i, max_i (state), scale_i, zp_i
(calculate_qparams). params (i32): [bits, is_signed, symmetric, narrow_range,
per_channel, axis, qmin, qmax, moving_average]; c (f32, (1)): averaging constant.

The file is written by hand (no dependency on the `safetensors` package):
8-byte LE header length, JSON header, raw bytes.
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402
from golden_common import GoldenTensors, qrange  # noqa: E402
import torch
import torch.ao.quantization as tq

warnings.filterwarnings("ignore")  # reduce_range deprecation chatter
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quant_ops.safetensors")

torch.manual_seed(20240612)
rng = np.random.default_rng(20240612)
tensors = GoldenTensors()
put = tensors.put




def levels(n, qmin, qmax, z):
    """n values in units of the step s (x = u * s): ties, grid points, random,
    far outside, zeros. Returned as float32 'u'; the caller multiplies by s."""
    lo, hi = qmin - z - 3, qmax - z + 3  # a few steps beyond both ends
    ks = np.arange(lo, hi + 1, dtype=np.float64)
    parts = [ks + 0.5, ks]  # exact ties (every half-way point in range and a few beyond) and the grid
    parts.append(rng.uniform(lo - 2, hi + 2, size=n))
    parts.append(rng.normal(0.0, (hi - lo) / 4.0, size=n // 2))
    parts.append(np.array([0.0, -0.0, 1e6, -1e6, 3e12, -3e12, 1e15, -1e15]))
    u = np.concatenate(parts)
    rng.shuffle(u)
    return u


def with_ulp_neighbours(x32, frac=0.15):
    """Moves a random subset of the values one float32 ulp up or down (so that
    near-ties appear on both sides of the rounding boundary)."""
    x = x32.copy().reshape(-1)
    idx = rng.choice(x.size, size=int(x.size * frac), replace=False)
    up = rng.random(idx.size) < 0.5
    x[idx[up]] = np.nextafter(x[idx[up]], np.float32(np.inf))
    x[idx[~up]] = np.nextafter(x[idx[~up]], np.float32(-np.inf))
    return x.reshape(x32.shape)


# ---------------------------------------------------------------- fake quantize per tensor
# (case, bits, signed, narrow, zero_point, scale)
PER_TENSOR = [
    ("s8", 8, True, False, 0, 0.25),
    ("s8_narrow", 8, True, True, 0, 0.125),
    ("s8_affine", 8, True, False, -5, 0.03125),
    ("s8_rand_scale", 8, True, False, 0, 0.0123457),
    ("s8_scale_0p1", 8, True, False, 3, 0.1),
    ("u8_affine", 8, False, False, 117, 0.0371),
    ("u8_sym", 8, False, False, 128, 0.25),
    ("u8_z0", 8, False, False, 0, 0.5),
    ("s4", 4, True, False, 0, 0.25),
    ("s4_narrow", 4, True, True, 0, 0.5),
    ("s4_affine", 4, True, False, 2, 0.0625),
    ("u4_affine", 4, False, False, 3, 0.5),
    ("u4_rand_scale", 4, False, False, 9, 0.173),
    ("s2", 2, True, False, 0, 0.5),
    ("s2_narrow", 2, True, True, 0, 0.25),
    ("u2", 2, False, False, 1, 0.25),
    ("u2_z3", 2, False, False, 3, 1.5),
]
for case, bits, signed, narrow, z, s in PER_TENSOR:
    qmin, qmax = qrange(bits, signed, narrow)
    s32 = np.float32(s)
    u = levels(96, qmin, qmax, z)
    x = with_ulp_neighbours((u.astype(np.float32) * s32).astype(np.float32))
    xt = torch.from_numpy(x).requires_grad_(True)
    y = torch.fake_quantize_per_tensor_affine(xt, float(s32), z, qmin, qmax)
    gy = torch.randn(y.shape)
    y.backward(gy)
    c = f"fq_pt_{case}"
    put(f"{c}.x", x)
    put(f"{c}.scale", np.array([s32], dtype=np.float32))
    put(f"{c}.zero_point", np.array([z], dtype=np.int32))
    put(f"{c}.gy", gy)
    put(f"{c}.y", y)
    put(f"{c}.dx", xt.grad)
    put(f"{c}.params", np.array([bits, signed, narrow, 0, 0, qmin, qmax], dtype=np.int32))

# ---------------------------------------------------------------- fake quantize per channel
# (case, bits, signed, narrow, shape, axis, zero points: "zero" | "mid" | "rand")
PER_CHANNEL = [
    ("s8_conv_w", 8, True, False, (5, 3, 4, 4), 0, "zero"),
    ("s8_narrow_linear_w", 8, True, True, (4, 40), 0, "zero"),
    ("u8_act_axis1", 8, False, False, (3, 4, 5, 6), 1, "rand"),
    ("s8_affine_axis1", 8, True, False, (2, 3, 7, 5), 1, "rand"),
    ("s4_2d_axis1", 4, True, False, (30, 6), 1, "rand"),
    ("s4_narrow_axis0", 4, True, True, (6, 2, 3, 3), 0, "zero"),
    ("u4_axis2", 4, False, False, (2, 3, 5), 2, "rand"),
    ("u4_axis3", 4, False, False, (2, 2, 3, 8), 3, "mid"),
    ("s2_axis0", 2, True, False, (3, 64), 0, "zero"),
    ("u2_axis1", 2, False, False, (4, 3, 10), 1, "rand"),
]
SCALE_POOL = np.array([0.25, 0.125, 0.5, 0.0625, 0.1, 0.0371, 0.0123457, 1.5, 0.03125, 2.0], dtype=np.float32)
for case, bits, signed, narrow, shape, axis, zmode in PER_CHANNEL:
    qmin, qmax = qrange(bits, signed, narrow)
    C = shape[axis]
    pick = rng.permutation(len(SCALE_POOL))[:C] if C <= len(SCALE_POOL) else rng.integers(0, len(SCALE_POOL), C)
    scale = SCALE_POOL[pick]
    if zmode == "zero":
        zp = np.zeros(C, dtype=np.int32)
    elif zmode == "mid":
        zp = np.full(C, (qmin + qmax + 1) // 2, dtype=np.int32)
    else:
        zp = rng.integers(qmin, qmax + 1, size=C).astype(np.int32)
    n = int(np.prod(shape))
    # levels per element, in units of its channel's step
    ks = np.concatenate([levels(max(1, n // 8), qmin, qmax, 0), rng.uniform(qmin - 4, qmax + 4, size=n)])
    u = rng.choice(ks, size=n, replace=True).reshape(shape)
    bshape = [1] * len(shape)
    bshape[axis] = C
    zb = zp.reshape(bshape).astype(np.float64)
    u = np.where(np.abs(u) < 1e5, u - zb, u)  # levels relative to each channel's zero point (ties stay ties)
    x = with_ulp_neighbours((u.astype(np.float32) * scale.reshape(bshape)).astype(np.float32))
    xt = torch.from_numpy(x).requires_grad_(True)
    y = torch.fake_quantize_per_channel_affine(xt, torch.from_numpy(scale), torch.from_numpy(zp), axis, qmin, qmax)
    gy = torch.randn(y.shape)
    y.backward(gy)
    c = f"fq_pc_{case}"
    put(f"{c}.x", x)
    put(f"{c}.scale", scale)
    put(f"{c}.zero_point", zp)
    put(f"{c}.gy", gy)
    put(f"{c}.y", y)
    put(f"{c}.dx", xt.grad)
    put(f"{c}.params", np.array([bits, signed, narrow, 1, axis, qmin, qmax], dtype=np.int32))


# ---------------------------------------------------------------- observers
def batches(kind, shape, axis):
    """Four float32 batches; per-channel ones get a different spread per channel."""
    out = []
    for i in range(4):
        if kind == "mixed":
            b = torch.randn(shape) * (1.0 + 0.5 * i) + 0.3 * (i - 1)
        elif kind == "positive":
            b = torch.rand(shape) * (2.0 + i) + 0.1
        elif kind == "negative":
            b = -torch.rand(shape) * (1.0 + i) - 0.2
        elif kind == "tiny":
            b = torch.randn(shape) * 1e-9
        elif kind == "zeros_then_mixed":
            b = torch.zeros(shape) if i < 2 else torch.randn(shape)
        else:
            raise ValueError(kind)
        if axis is not None:
            bs = [1] * len(shape)
            bs[axis] = shape[axis]
            b = b * (torch.arange(shape[axis], dtype=torch.float32).reshape(bs) * 0.4 + 0.3)
        out.append(b.float())
    return out


# (case, class, dtype, qscheme, quant_min/max or None, axis or None, data, averaging constant,
#  qat spec [bits, signed, symmetric, narrow])
OBSERVERS = [
    ("minmax_qu8_affine", "minmax", torch.quint8, torch.per_tensor_affine, None, None, "mixed", 0, [8, 0, 0, 0]),
    ("minmax_qs8_affine", "minmax", torch.qint8, torch.per_tensor_affine, None, None, "mixed", 0, [8, 1, 0, 0]),
    ("minmax_qs8_sym", "minmax", torch.qint8, torch.per_tensor_symmetric, None, None, "mixed", 0, [8, 1, 1, 0]),
    ("minmax_qu8_sym", "minmax", torch.quint8, torch.per_tensor_symmetric, None, None, "mixed", 0, [8, 0, 1, 0]),
    ("minmax_qs8_narrow_sym", "minmax", torch.qint8, torch.per_tensor_symmetric, (-127, 127), None, "mixed", 0,
     [8, 1, 1, 1]),
    ("minmax_s4_sym", "minmax", torch.qint8, torch.per_tensor_symmetric, (-8, 7), None, "mixed", 0, [4, 1, 1, 0]),
    ("minmax_u4_affine", "minmax", torch.quint8, torch.per_tensor_affine, (0, 15), None, "mixed", 0, [4, 0, 0, 0]),
    ("minmax_s2_affine", "minmax", torch.qint8, torch.per_tensor_affine, (-2, 1), None, "mixed", 0, [2, 1, 0, 0]),
    ("minmax_qu8_affine_positive", "minmax", torch.quint8, torch.per_tensor_affine, None, None, "positive", 0,
     [8, 0, 0, 0]),
    ("minmax_qu8_affine_negative", "minmax", torch.quint8, torch.per_tensor_affine, None, None, "negative", 0,
     [8, 0, 0, 0]),
    ("minmax_qs8_sym_tiny", "minmax", torch.qint8, torch.per_tensor_symmetric, None, None, "tiny", 0, [8, 1, 1, 0]),
    ("minmax_qu8_affine_tiny", "minmax", torch.quint8, torch.per_tensor_affine, None, None, "tiny", 0, [8, 0, 0, 0]),
    ("minmax_qu8_affine_zeros", "minmax", torch.quint8, torch.per_tensor_affine, None, None, "zeros_then_mixed", 0,
     [8, 0, 0, 0]),
    ("ma_qu8_affine", "ma", torch.quint8, torch.per_tensor_affine, None, None, "mixed", 0.01, [8, 0, 0, 0]),
    ("ma_qs8_sym", "ma", torch.qint8, torch.per_tensor_symmetric, None, None, "mixed", 0.01, [8, 1, 1, 0]),
    ("ma_qs8_affine_c03", "ma", torch.qint8, torch.per_tensor_affine, None, None, "mixed", 0.3, [8, 1, 0, 0]),
    ("ma_u4_affine_c02", "ma", torch.quint8, torch.per_tensor_affine, (0, 15), None, "mixed", 0.2, [4, 0, 0, 0]),
    ("ma_qu8_affine_positive", "ma", torch.quint8, torch.per_tensor_affine, None, None, "positive", 0.1,
     [8, 0, 0, 0]),
    ("pc_minmax_qs8_sym_axis0", "minmax", torch.qint8, torch.per_channel_symmetric, None, 0, "mixed", 0,
     [8, 1, 1, 0]),
    ("pc_minmax_qs8_narrow_sym_axis0", "minmax", torch.qint8, torch.per_channel_symmetric, (-127, 127), 0, "mixed",
     0, [8, 1, 1, 1]),
    ("pc_minmax_qu8_affine_axis1", "minmax", torch.quint8, torch.per_channel_affine, None, 1, "mixed", 0,
     [8, 0, 0, 0]),
    ("pc_minmax_qs8_affine_axis1", "minmax", torch.qint8, torch.per_channel_affine, None, 1, "positive", 0,
     [8, 1, 0, 0]),
    ("pc_minmax_s4_affine_axis0", "minmax", torch.qint8, torch.per_channel_affine, (-8, 7), 0, "mixed", 0,
     [4, 1, 0, 0]),
    ("pc_ma_qs8_sym_axis0", "ma", torch.qint8, torch.per_channel_symmetric, None, 0, "mixed", 0.01, [8, 1, 1, 0]),
    ("pc_ma_qu8_affine_axis1_c02", "ma", torch.quint8, torch.per_channel_affine, None, 1, "mixed", 0.2,
     [8, 0, 0, 0]),
    ("pc_ma_u4_affine_axis2_c05", "ma", torch.quint8, torch.per_channel_affine, (0, 15), 2, "negative", 0.5,
     [4, 0, 0, 0]),
]
OBS_SHAPE = {None: (4, 3, 5, 5), 0: (6, 3, 3, 3), 1: (4, 5, 3, 3), 2: (3, 2, 7)}
for case, cls, dtype, qscheme, qr, axis, data, c, spec in OBSERVERS:
    kw = {"dtype": dtype, "qscheme": qscheme, "reduce_range": False}
    if qr is not None:
        kw["quant_min"], kw["quant_max"] = qr
    if cls == "ma":
        kw["averaging_constant"] = c
    if axis is None:
        obs = (tq.MinMaxObserver if cls == "minmax" else tq.MovingAverageMinMaxObserver)(**kw)
    else:
        obs = (tq.PerChannelMinMaxObserver if cls == "minmax" else tq.MovingAveragePerChannelMinMaxObserver)(
            ch_axis=axis, **kw)
    name = f"obs_{case}"
    bits, signed, sym, narrow = spec
    qmin, qmax = obs.quant_min, obs.quant_max
    assert (qmin, qmax) == qrange(bits, signed, narrow), (case, qmin, qmax)
    put(f"{name}.params", np.array([bits, signed, sym, narrow, axis is not None, axis or 0, qmin, qmax, cls == "ma"],
                                   dtype=np.int32))
    put(f"{name}.c", np.array([c], dtype=np.float32))
    for i, b in enumerate(batches(data, OBS_SHAPE[axis], axis)):
        obs(b)
        s, z = obs.calculate_qparams()
        put(f"{name}.b{i}", b)
        put(f"{name}.min_{i}", obs.min_val.reshape(-1))
        put(f"{name}.max_{i}", obs.max_val.reshape(-1))
        put(f"{name}.scale_{i}", s.reshape(-1))
        put(f"{name}.zp_{i}", z.reshape(-1).to(torch.int32))


# ---------------------------------------------------------------- write


write_safetensors(OUT, tensors, {"generator": "tests/golden/gen_quant.py", "torch": torch.__version__,
                                 "reference_precision": "PyTorch float32 kernels (exact targets)"})
print(f"wrote {OUT}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")
