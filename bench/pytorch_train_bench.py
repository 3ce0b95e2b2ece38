#!/usr/bin/env python3
"""PyTorch side of `qat bench`: the same AlexNet-BN training step (forward,
cross-entropy, backward, SGD momentum 0.9 with weight decay) on synthetic
data, same resolution, batch and threads. Run with Debian's PyTorch:
    /usr/bin/python3 bench/pytorch_train_bench.py --res 128 --batch 32 --threads 2
"""
import argparse
import time

import torch
import torch.nn as nn


def alexnet_bn(num_classes):
    def block(cin, cout, k, s, p):
        return [nn.Conv2d(cin, cout, k, s, p, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    features = nn.Sequential(
        *block(3, 64, 11, 4, 2), nn.MaxPool2d(3, 2),
        *block(64, 192, 5, 1, 2), nn.MaxPool2d(3, 2),
        *block(192, 384, 3, 1, 1), *block(384, 256, 3, 1, 1), *block(256, 256, 3, 1, 1), nn.MaxPool2d(3, 2))
    classifier = nn.Sequential(
        nn.Dropout(0.5), nn.Linear(256 * 36, 4096), nn.ReLU(inplace=True),
        nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, num_classes))
    return nn.Sequential(features, nn.AdaptiveAvgPool2d(6), nn.Flatten(), classifier)


def add_common_args(ap):
    """--res --batch --threads --steps --warmup, shared by the training benches."""
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)


def time_steps(model, x, y, steps, warmup):
    """Images per second of SGD training steps (momentum 0.9, wd 5e-4) on one batch."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * x.shape[0] / (time.perf_counter() - t0)


def parse_and_setup():
    """Parses the common options, sets the threads and seed; returns (args, x, y)."""
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.randn(a.batch, 3, a.res, a.res)
    y = torch.randint(0, 10, (a.batch,))
    return a, x, y


def main():
    a, x, y = parse_and_setup()
    ips = time_steps(alexnet_bn(10).train(), x, y, a.steps, a.warmup)
    print(f"pytorch {torch.__version__}, {a.threads} threads, {a.res}x{a.res}, batch {a.batch}")
    print(f"train fp32: {ips:.1f} img/s  ({1000 * a.batch / ips:.1f} ms/step)")


if __name__ == "__main__":
    main()
