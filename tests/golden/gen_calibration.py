#!/usr/bin/python3
"""Golden vectors for qat's histogram calibrators (clipping threshold from a histogram of |x|),
made by an independent numpy reference (numpy only: no torch, no scipy).

Run:  /usr/bin/python3 tests/golden/gen_calibration.py
Writes tests/golden/calibration.safetensors.

Histograms: B = 2048 bins over [0, R], bin j covers [j*w, (j+1)*w), w = R/B. Each case draws
float64 samples from one np.random.default_rng(SEED) (cases drawn in the order below), rounds
them to float32, and bins a = |x| (float32) with R = max(a) (so R is exact in float32 and the top
bin is non-empty): j = min(floor(float64(a) * B / float64(R)), B - 1), i.e. a = R lands in B - 1.
  gaussian    1,000,000 N(0,1)
  laplacian   1,000,000 Laplace(0,1)
  long_tail   999,000 N(0,1), then 1,000 outliers U[20,60] times a random sign (+-1)
  relu_spike  max(x, 0) of 1,000,000 N(0.2,1): ~42% exact zeros, all in bin 0
  sparse      20,000 N(0,1): many empty bins in the tail
  relu_nonzero  relu_spike without its exact zeros (no new draws): how qat's histogram feeds
              the entropy and MSE searches (exact zeros, exactly representable on any grid, are
              left out of them)

Every case stores, under "<case>.<name>" (c = the counts as float64, thresholds as a bin COUNT i,
threshold T = i * w):
  hist        float32 (2048): the exact integer counts (all < 2^24)
  range       float32 (1): R, for information
  entropy128  int32 (1): TensorRT's KL calibration (Migacz, "8-bit inference with TensorRT",
  entropy8    GTC 2017) with Q = 128 / Q = 8 quantized levels. For i = 128..2048:
                P: p_j = c_j (j < i-1), p_{i-1} = c_{i-1} + sum_{j>=i} c_j (outliers folded in);
                Q: the UNFOLDED c_0..c_{i-1}, bin j in group g = (j*Q) // i (integers); each group's
                   sum spread evenly over its bins with c_j != 0 (q_j = 0 where c_j == 0);
                P, Q divided by their sums (Q's sum 0 -> KL = +inf);
                KL = sum_{p_j > 0} p_j log(p_j / q_j), +inf if such a q_j is 0.
              The i with the smallest KL; exact ties -> the smallest i.
  entropy256  int32 (1): the same with Q = 256 levels and candidates i = 256..2048 (uint8 after a ReLU)
  pct9999     int32 (1): percentile p = 99.99 / 99.9: i = k + 1 for the smallest k with
  pct999        c_0 + ... + c_k >= total * p / 100.0 (float64, total = sum of all counts).
  mse127      int32 (1): L = 127 / 7 positive levels, in bin units (w = 1), bin centres
  mse7          x_j = j + 0.5, step s = i / L, for i = 1..2048:
                err(i) = (s*s/12) * sum_{j<i} c_j + sum_{j>=i} c_j * (x_j - i)^2
              The i with the smallest err; exact ties -> the smallest i.
All of it in float64; sums with np.sum / np.cumsum (deterministic).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.safetensors")
SEED = 20250301
BINS = 2048
ENTROPY_START = 128


def draw_cases(rng):
    """name -> float32 samples, drawn in a fixed order from one generator."""
    cases = {}
    cases["gaussian"] = rng.normal(0.0, 1.0, 1_000_000)
    cases["laplacian"] = rng.laplace(0.0, 1.0, 1_000_000)
    body = rng.normal(0.0, 1.0, 999_000)
    outliers = rng.uniform(20.0, 60.0, 1_000) * rng.choice([-1.0, 1.0], 1_000)
    cases["long_tail"] = np.concatenate([body, outliers])
    cases["relu_spike"] = np.maximum(rng.normal(0.2, 1.0, 1_000_000), 0.0)
    cases["sparse"] = rng.normal(0.0, 1.0, 20_000)
    cases["relu_nonzero"] = cases["relu_spike"][cases["relu_spike"] != 0.0]
    return {k: v.astype(np.float32) for k, v in cases.items()}


def abs_histogram(x):
    """(counts as float64 (BINS), R): |x| binned over [0, R], R = max|x|."""
    a = np.abs(x).astype(np.float64)
    r = float(a.max())
    j = np.minimum(np.floor(a * BINS / r).astype(np.int64), BINS - 1)
    counts = np.bincount(j, minlength=BINS).astype(np.float64)
    assert counts.sum() == x.size and counts.max() < 2 ** 24 and counts[-1] > 0
    return counts, r


def kl_divergence_candidate(c, i, levels):
    """KL(P||Q) of TensorRT's entropy calibration for the candidate keeping i bins."""
    p = c[:i].copy()
    p[i - 1] += np.sum(c[i:])
    kept = c[:i]
    group = (np.arange(i, dtype=np.int64) * levels) // i
    nonzero = kept != 0
    group_sum = np.bincount(group, weights=kept, minlength=levels)
    group_nnz = np.bincount(group, weights=nonzero.astype(np.float64), minlength=levels)
    q = np.zeros(i)
    q[nonzero] = group_sum[group[nonzero]] / group_nnz[group[nonzero]]
    q_total = np.sum(q)
    if q_total == 0:
        return math.inf
    p = p / np.sum(p)
    q = q / q_total
    support = p > 0
    if np.any(q[support] == 0):
        return math.inf
    return float(np.sum(p[support] * np.log(p[support] / q[support])))


def entropy_threshold(c, levels, start=ENTROPY_START):
    """Bin count i in start..BINS with the smallest KL (first on ties)."""
    candidates = range(start, BINS + 1)
    kl = np.array([kl_divergence_candidate(c, i, levels) for i in candidates])
    return candidates[int(np.argmin(kl))]  # argmin: first minimum -> smallest i


def percentile_threshold(c, p):
    """i = k + 1, k the smallest bin with cumulative count >= total * p / 100."""
    cum = np.cumsum(c)
    target = np.sum(c) * p / 100.0
    return int(np.argmax(cum >= target)) + 1


def mse_error(c, i, levels):
    """Expected squared error (bin units) of clipping at i with step i / levels."""
    s = i / levels
    centres = np.arange(i, BINS, dtype=np.float64) + 0.5
    return (s * s / 12.0) * np.sum(c[:i]) + np.sum(c[i:] * (centres - i) ** 2)


def mse_threshold(c, levels):
    """Bin count i in 1..BINS with the smallest expected squared error (first on ties)."""
    err = np.array([mse_error(c, i, levels) for i in range(1, BINS + 1)])
    return int(np.argmin(err)) + 1


def main():
    rng = np.random.default_rng(SEED)
    arrays = {}
    rows = []
    for name, x in draw_cases(rng).items():
        c, r = abs_histogram(x)
        res = {"entropy128": entropy_threshold(c, 128), "entropy8": entropy_threshold(c, 8),
               "entropy256": entropy_threshold(c, 256, 256),
               "pct9999": percentile_threshold(c, 99.99), "pct999": percentile_threshold(c, 99.9),
               "mse127": mse_threshold(c, 127), "mse7": mse_threshold(c, 7)}
        arrays[f"{name}.hist"] = c.astype("<f4")
        arrays[f"{name}.range"] = np.array([r], "<f4")
        for key, i in res.items():
            arrays[f"{name}.{key}"] = np.array([i], "<i4")
        clipped = np.sum(c[res["entropy128"]:])
        rows.append((name, r, res, int(clipped)))

    meta = {
        "generator": "tests/golden/gen_calibration.py",
        "seed": str(SEED),
        "bins": f"{BINS} bins over [0, R], bin j = [j*w, (j+1)*w), w = R/B, R = max|x| (float32)",
        "entropy": "TensorRT KL (Migacz GTC 2017), i = 128..2048: P folds c[i:] into bin i-1; Q merges "
                   "unfolded c[:i] into Q groups g = j*Q//i, spread over nonzero bins; min KL, ties -> smallest i",
        "percentile": "i = k+1, smallest k with cumsum(c)[k] >= total * p / 100.0",
        "mse": "bin units, centres j+0.5, s = i/L, err = s^2/12 * sum(c[:i]) + sum(c[j>=i] (j+0.5-i)^2), "
               "i = 1..2048, min err, ties -> smallest i",
    }
    write_safetensors(OUT, arrays, meta)

    print(f"{'case':<11} {'R':>8} {'ent128':>6} {'ent8':>5} {'p9999':>5} {'p999':>5} "
          f"{'mse127':>6} {'mse7':>5} {'T_ent128':>8} {'clipped':>7}")
    for name, r, res, clipped in rows:
        w = r / BINS
        print(f"{name:<11} {r:8.4f} {res['entropy128']:6d} {res['entropy8']:5d} {res['pct9999']:5d} "
              f"{res['pct999']:5d} {res['mse127']:6d} {res['mse7']:5d} {res['entropy128'] * w:8.4f} {clipped:7d}")
    print(f"wrote {OUT}: {len(arrays)} tensors, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
