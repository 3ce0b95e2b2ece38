#!/usr/bin/env python3
"""Per-layer INT8-training figures of runs' metrics.jsonl: the mean over
epochs of the cosine distances (weight- and input-gradient quantizers) and of
the learning-rate scale phi(d), one column group per run.
Usage: layer_table.py RUN_DIR [RUN_DIR ...] > layers.md"""
import json
import os
import sys


def layer_means(run):
    rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
    out = {}
    for r in rows:
        for layer, v in r.get("int8", {}).items():
            acc = out.setdefault(layer, {"distance_dw": [], "distance_dx": [], "lr_scale": []})
            for k in acc:
                if v.get(k) is not None:
                    acc[k].append(v[k])
    return {l: {k: (sum(x) / len(x) if x else None) for k, x in d.items()} for l, d in out.items()}


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def main(runs):
    means = [layer_means(r) for r in runs]
    layers = list(means[0])
    names = [os.path.basename(os.path.normpath(r)) for r in runs]
    print("| layer | " + " | ".join(f"{n}: d(dW) / d(dX) / φ" for n in names) + " |")
    print("|---|" + "---|" * len(runs))
    for l in layers:
        cells = []
        for m in means:
            v = m.get(l, {})
            cells.append(f"{fmt(v.get('distance_dw'), '.4f')} / {fmt(v.get('distance_dx'), '.4f')} / "
                         f"{fmt(v.get('lr_scale'), '.3f')}")
        print(f"| {l} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
