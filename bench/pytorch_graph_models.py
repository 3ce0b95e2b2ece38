#!/usr/bin/env python3
"""PyTorch's side of qat's graph models (issue 42): the same networks in
torchvision's definitions (ResNet-18 and MobileNetV2 from torchvision;
ResNet-20 built from torchvision's BasicBlock with 1x1 projection
shortcuts, as models/resnet.h), PyTorch's default layer initialisation as
qat's.

  train: the recipe of a qat config (model, data folders, crop, padding,
         flips, normalisation, SGD momentum, weight decay off BN and biases
         when train.no_decay_bn_bias, cosine decay per step from train.lr,
         batch, epochs, seed, threads); prints one line per epoch, as qat's
         metrics (train loss / top-1, val loss / top-1), and writes a CSV.
  bench: the training step's speed on synthetic data (--model --res --batch
         --threads --steps --warmup), as `qat bench --model`.

Run with Debian's PyTorch 1.13 and torchvision 0.14:
  /usr/bin/python3 bench/pytorch_graph_models.py train configs/resnet20_cifar10.yaml --csv out.csv
  /usr/bin/python3 bench/pytorch_graph_models.py bench --model resnet20 --res 32 --batch 128
"""
import argparse
import csv
import math
import os
import time

import torch
import torch.nn as nn
import yaml
from torchvision import datasets, models, transforms
from torchvision.models.resnet import BasicBlock


def resnet20(num_classes):
    """He et al.'s CIFAR ResNet-20 with torchvision's blocks and names."""

    class ResNet20(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.relu = nn.ReLU(inplace=True)
            layers, inp = [], 16
            for i, w in enumerate([16, 32, 64]):
                blocks = []
                for b in range(3):
                    stride = 2 if i > 0 and b == 0 else 1
                    down = None
                    if stride != 1 or inp != w:
                        down = nn.Sequential(nn.Conv2d(inp, w, 1, stride, bias=False), nn.BatchNorm2d(w))
                    blocks.append(BasicBlock(inp, w, stride, down))
                    inp = w
                layers.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, num_classes)

        def forward(self, x):
            x = self.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet20()


def make_model(name, num_classes, stem="imagenet"):
    if name == "resnet20":
        return resnet20(num_classes)
    if name == "resnet18":
        m = models.resnet18(num_classes=num_classes)
        if stem == "small":
            m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            m.maxpool = nn.Identity()
        return m
    if name == "mobilenet_v2":
        m = models.mobilenet_v2(num_classes=num_classes)
        if stem == "small":  # the stem and the first 24-channel stage at stride 1, as models/mobilenet.h
            m.features[0][0].stride = (1, 1)
            m.features[2].conv[1][0].stride = (1, 1)
        return m
    raise SystemExit(f"unknown model {name}")


def default_init(model):
    """PyTorch's default initialisation of every layer (torchvision's
    constructors apply their own; qat's layers use the default)."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear, nn.BatchNorm2d)):
            m.reset_parameters()


def param_groups(model, lr, wd, no_decay_bn_bias):
    decay, no_decay = [], []
    for m in model.modules():
        for name, p in m.named_parameters(recurse=False):
            (no_decay if no_decay_bn_bias and (isinstance(m, nn.BatchNorm2d) or name == "bias") else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def loaders(cfg, cfg_dir):
    d = cfg["data"]
    aug = d.get("augment", {})
    norm = transforms.Normalize(d["mean"], d["std"])
    size = d["image_size"]
    train_tf = [transforms.Resize(d.get("resize", size))]
    if aug.get("random_crop", True):
        train_tf.append(transforms.RandomCrop(size, padding=aug.get("padding", 0)))
    else:
        train_tf.append(transforms.CenterCrop(size))
    if aug.get("hflip", True):
        train_tf.append(transforms.RandomHorizontalFlip())
    train_tf += [transforms.ToTensor(), norm]
    val_tf = [transforms.Resize(d.get("resize", size)), transforms.CenterCrop(size), transforms.ToTensor(), norm]
    root = lambda p: os.path.normpath(os.path.join(cfg_dir, p))  # noqa: E731
    train = datasets.ImageFolder(root(d["train"]), transforms.Compose(train_tf))
    val = datasets.ImageFolder(root(d["val"]), transforms.Compose(val_tf))
    b = cfg["train"]["batch_size"]
    g = torch.Generator().manual_seed(cfg["train"].get("seed", 0))
    return (torch.utils.data.DataLoader(train, b, shuffle=True, drop_last=True, num_workers=2, generator=g),
            torch.utils.data.DataLoader(val, 256, num_workers=2))


def evaluate(model, loader):
    model.eval()
    loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            loss += nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            n += y.numel()
    return loss / n, correct / n


def sgd_of(model, t):
    """The config's SGD (momentum, Nesterov, weight decay off BN and biases
    when train.no_decay_bn_bias)."""
    return torch.optim.SGD(param_groups(model, t["lr"], t.get("weight_decay", 0), t.get("no_decay_bn_bias", False)),
                           lr=t["lr"], momentum=t.get("momentum", 0.9), nesterov=t.get("nesterov", False))


def train_epoch(model, opt, loader, t, epoch):
    """One epoch of steps, lr on qat's cosine per step; returns (images,
    loss sum, correct, seconds)."""
    model.train()
    epochs, steps = t["epochs"], len(loader)
    t0, seen, loss_sum, correct = time.time(), 0, 0.0, 0
    for i, (x, y) in enumerate(loader):
        lr = 0.5 * t["lr"] * (1 + math.cos(math.pi * (epoch + i / steps) / epochs))  # qat's cosine, per step
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        seen += y.numel()
        loss_sum += loss.item() * y.numel()
        correct += (out.argmax(1) == y).sum().item()
    return seen, loss_sum, correct, time.time() - t0


def train(a):
    cfg = yaml.safe_load(open(a.config))
    t = cfg["train"]
    torch.manual_seed(t.get("seed", 0))
    torch.set_num_threads(a.threads)
    model = make_model(cfg["model"]["name"], cfg["model"].get("num_classes", 10), cfg["model"].get("stem", "imagenet"))
    default_init(model)
    train_loader, val_loader = loaders(cfg, os.path.dirname(os.path.abspath(a.config)))
    opt = sgd_of(model, t)
    rows = []
    for epoch in range(t["epochs"]):
        seen, loss_sum, correct, secs = train_epoch(model, opt, train_loader, t, epoch)
        vl, vt = evaluate(model, val_loader)
        rows.append([epoch + 1, loss_sum / seen, correct / seen, vl, vt, seen / secs])
        print(f"epoch {epoch + 1}: train loss {loss_sum / seen:.4f} top-1 {100 * correct / seen:.2f}% | "
              f"val loss {vl:.4f} top-1 {100 * vt:.2f}% | {seen / secs:.1f} img/s", flush=True)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["epoch", "train_loss", "train_top1", "val_loss", "val_top1", "images_per_second"])
            w.writerows(rows)


def bench(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = make_model(a.model, 10, a.stem).train()
    x, y = torch.randn(a.batch, 3, a.res, a.res), torch.randint(0, 10, (a.batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    ips = a.steps * a.batch / (time.perf_counter() - t0)
    print(f"pytorch {torch.__version__}, {a.threads} threads, {a.model} {a.res}x{a.res}, batch {a.batch}")
    print(f"train fp32: {ips:.1f} img/s  ({1000 * a.batch / ips:.1f} ms/step)")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train")
    tr.add_argument("config")
    tr.add_argument("--threads", type=int, default=2)
    tr.add_argument("--csv")
    be = sub.add_parser("bench")
    be.add_argument("--model", default="resnet20")
    be.add_argument("--stem", default="imagenet")
    be.add_argument("--res", type=int, default=32)
    be.add_argument("--batch", type=int, default=128)
    be.add_argument("--threads", type=int, default=2)
    be.add_argument("--steps", type=int, default=10)
    be.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    train(a) if a.cmd == "train" else bench(a)


if __name__ == "__main__":
    main()
