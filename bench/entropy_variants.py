#!/usr/bin/env python3
"""qat's entropy calibrator against TensorRT's published one, on the six
synthetic histograms of tests/golden/gen_calibration.py (int8: 128 levels,
candidates i = 128..2048 bins of width w = max|x| / 2048).

Two departures, measured apart and together:
  grouping   qat merges bin j of a candidate into group floor(j * 128 / i);
             TensorRT (Migacz's pseudocode, MXNet's implementation) merges
             runs of i // 128 bins and adds the remainder to the last group.
  threshold  qat keeps T = i * w (the candidate's edge); TensorRT's slides
             give T = (i + 0.5) * w (the middle of the last kept bin).
Prints, per case, the chosen bin counts and thresholds (in units of max|x|)
and the relative change of T. Run: /usr/bin/python3 bench/entropy_variants.py
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from gen_calibration import BINS, SEED, abs_histogram, draw_cases, kl_divergence_candidate  # noqa: E402

LEVELS = 128


def kl_runs(c, i, levels):
    """KL(P||Q) with Q merged in runs of i // levels bins, the remainder in the last group."""
    p = c[:i].copy()
    p[i - 1] += np.sum(c[i:])
    kept = c[:i]
    run = i // levels
    group = np.minimum(np.arange(i, dtype=np.int64) // run, levels - 1)
    nonzero = kept != 0
    group_sum = np.bincount(group, weights=kept, minlength=levels)
    group_nnz = np.bincount(group, weights=nonzero.astype(np.float64), minlength=levels)
    q = np.zeros(i)
    q[nonzero] = group_sum[group[nonzero]] / group_nnz[group[nonzero]]
    if np.sum(q) == 0:
        return math.inf
    p = p / np.sum(p)
    q = q / np.sum(q)
    support = p > 0
    if np.any(q[support] == 0):
        return math.inf
    return float(np.sum(p[support] * np.log(p[support] / q[support])))


def best(c, kl):
    candidates = range(LEVELS, BINS + 1)
    values = np.array([kl(c, i, LEVELS) for i in candidates])
    return candidates[int(np.argmin(values))]


def main():
    cases = draw_cases(np.random.default_rng(SEED))
    cases.pop("relu_spike")  # qat leaves exact zeros out: relu_nonzero is what it searches
    print(f"{'case':14} {'qat i':>6} {'runs i':>6} {'T qat':>9} {'T grouping':>11} {'T middle':>9} {'T TensorRT':>11}"
          f" {'grouping':>9} {'middle':>8} {'both':>8}")
    for name, x in cases.items():
        c, _ = abs_histogram(x)
        i_qat, i_runs = best(c, kl_divergence_candidate), best(c, kl_runs)
        t_qat = i_qat / BINS  # in units of max|x|
        t_grouping = i_runs / BINS
        t_middle = (i_qat + 0.5) / BINS
        t_trt = (i_runs + 0.5) / BINS
        rel = lambda t: f"{100 * (t / t_qat - 1):+.2f}%"  # noqa: E731
        print(f"{name:14} {i_qat:6d} {i_runs:6d} {t_qat:9.5f} {t_grouping:11.5f} {t_middle:9.5f} {t_trt:11.5f}"
              f" {rel(t_grouping):>9} {rel(t_middle):>8} {rel(t_trt):>8}")


if __name__ == "__main__":
    main()
