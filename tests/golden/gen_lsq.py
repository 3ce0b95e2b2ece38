#!/usr/bin/python3
"""Golden vectors for qat's LSQ / LSQ+ quantizers (quant/sim/lsq.h), made by PyTorch.

Run:  /usr/bin/python3 tests/golden/gen_lsq.py
Writes tests/golden/lsq.safetensors (read by tests/quant/sim/test_lsq.cpp).

Every case stores, under "<case>.<name>":
  spec        int32 [bits, signed, narrow, per_channel, axis, qmin, qmax]
  x, step, gy float32 input, positive step (1) or (C), upstream gradient
  offset      float32 LSQ+ offset beta (only LSQ+ cases), same shape as step
  gf          float32 (1): the gradient scale 1/sqrt(N * Q_P), N = elements per step
Two references:
  ref.*  (every case) the papers' formulas, written as a float64 autograd
         composition from the float32 inputs, rounded to float32 once:
           t = (x - beta) / s
           tc = F.hardtanh(t, qmin, qmax)   (as the code in Esser et al.'s appendix: PyTorch's
                                             kernel clips, gradient 0 where t <= -Q_N or t >= Q_P)
           y = (tc + (round(tc) - tc).detach()) * s + beta          (STE on round, half to even)
         with s and beta passed through the LSQ paper's grad_scale trick
         ((p - p*g).detach() + p*g). Stores ref.y, ref.dx, ref.dstep, ref.doffset.
         qat's LsqClip::paper must match these.
  pt.*   (cases with no offset, or offset = -z*s with integer z) PyTorch's own
         float32 kernels torch._fake_quantize_learnable_per_{tensor,channel}_affine
         (x, scale, zero_point z, ..., grad_factor=gf): pt.zero_point, pt.y, pt.dx,
         pt.dscale, pt.dzero_point. PyTorch calls an element clipped when
         round(x/s + z) is outside [qmin, qmax]; qat's LsqClip::rounded must
         match. PyTorch's gradients are for (s, z); qat's for (s, beta) with
         beta = -z s, so (see test_lsq.cpp) dbeta = -dz / s and
         ds|beta = ds|z - z * dz / s.
Inputs include exact ties (x/s = k + 1/2, power-of-two scales so that x/s is
exact in float32 and float64), the exact ends of the range, values far
outside it, and random values kept at least 1e-3 away from any rounding
boundary (so float32 x * (1/s) and float64 x / s round the same way).
The file is written by hand: 8-byte LE header length, JSON header, raw bytes.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402
from golden_common import GoldenTensors, qrange  # noqa: E402
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsq.safetensors")

torch.manual_seed(20240612)
rng = np.random.default_rng(20240612)
tensors = GoldenTensors()
put = tensors.put




def bshape(shape, axis, per_channel):
    """Shape that broadcasts a (C) parameter along `axis`."""
    if not per_channel:
        return (1,) * len(shape)
    return tuple(shape[d] if d == axis else 1 for d in range(len(shape)))


def safe_t(t32, t64):
    """True where t (both precisions) is > 1e-3 from every half-integer (rounding step)
    and every integer (where a range end could sit), and both round the same way."""
    frac = t64 - np.floor(t64)
    far = np.minimum(np.minimum(np.abs(frac - 0.5), frac), 1.0 - frac) > 1e-3
    same = (np.floor(t32 + 0.5) == np.floor(t64 + 0.5)) & (np.floor(t32) == np.floor(t64))
    return far & same


def random_x(shape, s, beta, axis, per_channel, qmin, qmax, spread=1.6):
    """Random float32 x with t = (x - beta)/s spread over ~[qmin, qmax] * spread and
    no element within 1e-3 of a rounding boundary (resampled until none is)."""
    bs = bshape(shape, axis, per_channel)
    s = np.asarray(s, np.float32).reshape(bs)
    b = np.zeros(bs, np.float32) if beta is None else np.asarray(beta, np.float32).reshape(bs)
    centre, half = (qmin + qmax) / 2.0, (qmax - qmin) / 2.0 * spread
    x = np.empty(shape, np.float32)
    todo = np.ones(shape, bool)
    while todo.any():
        t = rng.uniform(centre - half, centre + half, size=shape)
        cand = (t * s + b).astype(np.float32)
        t32 = (cand - b) * (np.float32(1) / s)  # qat's float32 computation
        t64 = (cand.astype(np.float64) - b) / s.astype(np.float64)
        ok = safe_t(t32.astype(np.float64), t64) & todo
        x[ok] = cand[ok]
        todo &= ~ok
    return x


def grid_t(qmin, qmax):
    """Exact ties k + 1/2 and integers around and inside the range, and far-out values."""
    halves = [k + 0.5 for k in range(qmin - 3, qmax + 3)]
    ints = [float(k) for k in range(qmin - 2, qmax + 3)]
    far = [-1e6, -1e4, -3.0 * (qmax - qmin + 1), 3.0 * (qmax - qmin + 1), 1e4, 1e6]
    return np.array(halves + ints + far, np.float64)


def grad_scale_param(p, g):
    return (p - p * g).detach() + p * g


def paper_reference(x32, s32, b32, gy32, axis, per_channel, qmin, qmax, gf):
    shape = tuple(x32.shape)
    bs = bshape(shape, axis, per_channel)
    x = torch.from_numpy(x32).double().requires_grad_(True)
    s = torch.from_numpy(s32).double().requires_grad_(True)
    b = torch.from_numpy(b32).double().requires_grad_(True) if b32 is not None else None
    sg = grad_scale_param(s, gf).reshape(bs)
    t = x / sg if b is None else (x - grad_scale_param(b, gf).reshape(bs)) / sg
    # The LSQ paper's own code clips with F.hardtanh: PyTorch's kernel, whose
    # gradient is 0 where t <= qmin or t >= qmax, decides the clipped set.
    tc = F.hardtanh(t, float(qmin), float(qmax))
    q = tc + (torch.round(tc) - tc).detach()
    y = q * sg if b is None else q * sg + grad_scale_param(b, gf).reshape(bs)
    y.backward(torch.from_numpy(gy32).double())
    return y, x.grad, s.grad, (b.grad if b is not None else None)


def pytorch_learnable(x32, s32, z, gy32, axis, per_channel, qmin, qmax, gf):
    x = torch.from_numpy(x32).clone().requires_grad_(True)
    scale = torch.from_numpy(s32).clone().requires_grad_(True)
    zp = torch.tensor(np.asarray(z, np.float32).reshape(s32.shape)).requires_grad_(True)
    if per_channel:
        y = torch._fake_quantize_learnable_per_channel_affine(x, scale, zp, axis, qmin, qmax, gf)
    else:
        y = torch._fake_quantize_learnable_per_tensor_affine(x, scale, zp, qmin, qmax, gf)
    y.backward(torch.from_numpy(gy32))
    return y, x.grad, scale.grad, zp.grad, zp.detach()


def add_case(name, bits, signed, narrow, x, step, offset=None, z=None, per_channel=False, axis=0):
    """x: float32 array; step: float32 (1) or (C); offset: float32 like step or None;
    z: integer zero points (like step) when offset == -z*step, for the PyTorch path."""
    qmin, qmax = qrange(bits, signed, narrow)
    x = np.asarray(x, np.float32)
    step = np.asarray(step, np.float32).reshape(-1)
    n_per_step = x.size // step.size
    gf = np.float32(1.0 / math.sqrt(n_per_step * qmax))
    gy = torch.randn(x.shape, dtype=torch.float32).numpy()
    put(f"{name}.spec", np.array([bits, int(signed), int(narrow), int(per_channel), axis, qmin, qmax]))
    put(f"{name}.x", x)
    put(f"{name}.step", step)
    if offset is not None:
        offset = np.asarray(offset, np.float32).reshape(-1)
        put(f"{name}.offset", offset)
    put(f"{name}.gf", np.array([gf], np.float32))
    put(f"{name}.gy", gy)

    y, dx, ds, db = paper_reference(x, step, offset, gy, axis, per_channel, qmin, qmax, float(gf))
    put(f"{name}.ref.y", y)
    put(f"{name}.ref.dx", dx)
    put(f"{name}.ref.dstep", ds)
    if db is not None:
        put(f"{name}.ref.doffset", db)

    if offset is None or z is not None:
        zz = np.zeros(step.shape) if z is None else np.asarray(z, np.float64).reshape(-1)
        if offset is not None:  # the mapping beta = -z*s must hold in float32
            assert np.array_equal((-zz * step).astype(np.float32), offset), name
        assert ((zz >= qmin) & (zz <= qmax)).all(), name
        y, dx, dsc, dz, zp = pytorch_learnable(x, step, zz, gy, axis, per_channel, qmin, qmax, float(gf))
        put(f"{name}.pt.zero_point", zp)
        put(f"{name}.pt.y", y)
        put(f"{name}.pt.dx", dx)
        put(f"{name}.pt.dscale", dsc)
        put(f"{name}.pt.dzero_point", dz)


def ties_and_random(qmin, qmax, s, beta=0.0, n_random=40):
    """Grid of exact ties/ends/far values for a power-of-two s, plus random values."""
    t = grid_t(qmin, qmax)
    xs = (t * s + beta).astype(np.float32)
    assert np.array_equal((xs.astype(np.float64) - beta) / s, t), "grid not exact"
    r = random_x((n_random,), [s], None if beta == 0.0 else [beta], 0, False, qmin, qmax)
    out = np.concatenate([xs, r])
    rng.shuffle(out)
    return out


# ---------------------------------------------------------------- LSQ, per tensor
# power-of-two steps: exact ties, range ends and far-out values, all widths
for bits in (8, 4, 2):
    for signed in (True, False):
        qmin, qmax = qrange(bits, signed, False)
        s = 2.0**-3 if bits != 8 else 2.0**-5
        add_case(f"lsq_t_b{bits}_{'s' if signed else 'u'}_ties", bits, signed, False,
                 ties_and_random(qmin, qmax, s), [s])
qmin, qmax = qrange(4, True, True)
add_case("lsq_t_b4_narrow_ties", 4, True, True, ties_and_random(qmin, qmax, 0.25), [0.25])

# arbitrary steps, random values (no ties), 2-D input
for bits, signed, s in ((8, True, 0.0371), (4, False, 0.173), (2, True, 0.61)):
    qmin, qmax = qrange(bits, signed, False)
    x = random_x((6, 7), [s], None, 0, False, qmin, qmax)
    add_case(f"lsq_t_b{bits}_{'s' if signed else 'u'}_rand", bits, signed, False, x, [s])

# ---------------------------------------------------------------- LSQ, per channel
# (name, bits, signed, shape, axis)
for name, bits, signed, shape, axis in (
    ("lsq_c_b4_s_axis0", 4, True, (4, 3, 5), 0),  # conv/linear weight layout
    ("lsq_c_b8_u_axis1", 8, False, (2, 3, 4, 4), 1),  # NCHW activations
    ("lsq_c_b2_s_last", 2, True, (6, 5), 1),  # channel axis last (inner = 1)
    ("lsq_c_b4_u_last", 4, False, (3, 4, 16), 2),
):
    qmin, qmax = qrange(bits, signed, False)
    c = shape[axis]
    s = rng.uniform(0.05, 0.5, size=c).astype(np.float32)
    x = random_x(shape, s, None, axis, True, qmin, qmax)
    add_case(name, bits, signed, False, x, s, per_channel=True, axis=axis)

# per-channel with power-of-two steps and the tie grid along the channel's elements
qmin, qmax = qrange(4, True, False)
t = grid_t(qmin, qmax)
s = np.array([2.0**-2, 2.0**-4, 2.0**-1], np.float32)
x = (t[None, :] * s[:, None]).astype(np.float32)  # (3, len(t)), axis 0
add_case("lsq_c_b4_s_ties", 4, True, False, x, s, per_channel=True, axis=0)

# ---------------------------------------------------------------- LSQ+, integer zero points (PyTorch path too)
# Zero points of the tie grids are even and not negative, because
#  - PyTorch's forward rounds x/s and then adds z (round(x/s) + z), LSQ+ rounds
#    (x - beta)/s = x/s + z: at an exact tie the two differ when z is odd
#    (half-to-even parity); for even z they are the same function;
#  - PyTorch 1.13's per-tensor backward takes z as int(z + 0.5), truncating
#    toward zero, so a negative z is off by one there (forward and backward then
#    disagree); the per-channel kernels round z properly (negative z below).
for bits, signed, s, z in ((4, False, 2.0**-2, 2), (8, True, 2.0**-4, 4), (2, False, 2.0**-1, 2)):
    qmin, qmax = qrange(bits, signed, False)
    beta = float(np.float32(-z * s))
    add_case(f"lsqp_t_b{bits}_{'s' if signed else 'u'}_z{z}", bits, signed, False,
             ties_and_random(qmin, qmax, s, beta=beta), [s], offset=[beta], z=[z])
# arbitrary step, integer zero point: beta = float32(-z*s) must equal -z*s exactly
s = np.float32(0.0625 * 3)  # 0.1875: -z*s exact in float32 for small z
qmin, qmax = qrange(8, False, False)
x = random_x((5, 9), [s], [np.float32(-7 * s)], 0, False, qmin, qmax)
add_case("lsqp_t_b8_u_rand", 8, False, False, x, [s], offset=[np.float32(-7 * s)], z=[7])

for name, bits, signed, shape, axis, zs in (
    ("lsqp_c_b4_u_axis0", 4, False, (3, 20), 0, [2, 0, 9]),
    ("lsqp_c_b8_s_axis1", 8, True, (2, 3, 4), 1, [-3, 4, 0]),
    ("lsqp_c_b4_s_last", 4, True, (8, 4), 1, [1, -2, 0, 3]),
):
    qmin, qmax = qrange(bits, signed, False)
    c = shape[axis]
    s = (2.0 ** -rng.integers(1, 5, size=c) * rng.choice([1.0, 1.5, 1.25], size=c)).astype(np.float32)
    beta = (-np.asarray(zs, np.float64) * s).astype(np.float32)
    x = random_x(shape, s, beta, axis, True, qmin, qmax)
    add_case(name, bits, signed, False, x, s, offset=beta, z=zs, per_channel=True, axis=axis)

# ---------------------------------------------------------------- LSQ+, non-integer offsets (paper reference only)
qmin, qmax = qrange(4, False, False)
add_case("lsqp_t_b4_u_frac", 4, False, False, ties_and_random(qmin, qmax, 0.125, beta=-0.3125), [0.125],
         offset=[-0.3125])  # beta/s = -2.5: a Swish-like negative range
qmin, qmax = qrange(2, True, False)
add_case("lsqp_t_b2_s_frac", 2, True, False, ties_and_random(qmin, qmax, 0.5, beta=0.0625), [0.5], offset=[0.0625])
qmin, qmax = qrange(8, True, False)
s = rng.uniform(0.01, 0.05, size=3).astype(np.float32)
beta = rng.uniform(-0.5, 0.5, size=3).astype(np.float32)
x = random_x((3, 4, 5), s, beta, 0, True, qmin, qmax)
add_case("lsqp_c_b8_s_frac", 8, True, False, x, s, offset=beta, per_channel=True, axis=0)


# ---------------------------------------------------------------- write


write_safetensors(OUT, tensors, {"generator": "tests/golden/gen_lsq.py", "torch": torch.__version__,
                                 "ref": "float64 autograd of the LSQ/LSQ+ formulas from float32 inputs",
                                 "pt": "torch._fake_quantize_learnable_per_{tensor,channel}_affine, float32"})
print(f"wrote {OUT}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")
