#!/usr/bin/env python3
"""PyTorch's eager-mode QAT of torchvision's quantizable ResNet-18 or
MobileNetV2, or with --fx its FX graph-mode QAT of the plain torchvision
model, beside qat's W8A8 QAT (issue 43): the same FP32 weights (a qat
checkpoint, loaded by name), the recipe of a qat W8A8 config, then the
converted int8 model on the val set.

  recipe  the config's train: epochs, batch, SGD momentum, lr with qat's
          per-step cosine decay, weight decay off BN and biases, seed; and
          quant.freeze_bn_epoch (BN statistics frozen from that epoch on,
          1-based, as qat counts).
  data    bench/pytorch_graph_models.py's loaders: the config's folders,
          resize, crop, flips and normalisation with torchvision's transforms.
  qconfig get_default_qat_qconfig("onednn"): int8 symmetric per-channel
          weights, uint8 affine per-tensor activations over the full range,
          moving-average min/max observers (averaging constant 0.01), as
          qat's default backend.
  model   torchvision's quantizable model (model.fuse_model(is_qat=True):
          Conv+BN(+ReLU) fused, BN folded as it trains; the residual add
          with its ReLU as one quantized op), the small stem for 32 px as
          bench/pytorch_graph_models.py builds it.
  --fx    torchvision's plain model traced by prepare_qat_fx with
          get_default_qat_qconfig_mapping("onednn") (the same qconfig;
          the patterns matched on the traced graph, as qat's prepare
          matches them on its own), converted by convert_fx.

Prints one line per epoch (the fake-quant model's val top-1), then the
converted int8 model's val top-1 (engine onednn; Debian's PyTorch 1.13 has
no FBGEMM) and their top-1 agreement on the val set.

  /usr/bin/python3 bench/pytorch_qat_graph.py configs/resnet18_w8a8_imagenette.yaml \\
      --fp32 runs/resnet18_imagenette/best.safetensors --threads 1 --csv out.csv
"""
import argparse
import copy
import csv
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import yaml
from torch.ao import quantization as tq
from torch.ao.quantization import quantize_fx
from torchvision import models as tvm
from torchvision.models import quantization as qm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results", "ptq"))
from pytorch_graph_models import loaders, sgd_of, train_epoch  # noqa: E402
from pytorch_ptq import read_safetensors  # noqa: E402


def quantizable_model(name, classes, stem, fx=False):
    """torchvision's quantizable model, or with fx its plain one (the same
    parameter names)."""
    if name == "resnet18":
        m = (tvm.resnet18(weights=None, num_classes=classes) if fx
             else qm.resnet18(weights=None, quantize=False, num_classes=classes))
        if stem == "small":
            m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            m.maxpool = nn.Identity()
        return m
    if name == "mobilenet_v2":
        m = (tvm.mobilenet_v2(weights=None, num_classes=classes) if fx
             else qm.mobilenet_v2(weights=None, quantize=False, num_classes=classes))
        if stem == "small":  # as bench/pytorch_graph_models.py's make_model
            m.features[0][0].stride = (1, 1)
            m.features[2].conv[1][0].stride = (1, 1)
        return m
    raise SystemExit(f"no quantizable torchvision model for {name}")


def load_fp32(model, path):
    """The qat checkpoint's model.<name> tensors into the model by name; every
    model tensor must be there (BatchNorm's num_batches_tracked aside)."""
    tensors, _, _ = read_safetensors(path, lambda n: n.startswith("model."))
    state = {k[len("model."):]: torch.from_numpy(np.ascontiguousarray(a)) for k, (_, a) in tensors.items()}
    want = model.state_dict()
    missing = [k for k in want if k not in state and not k.endswith("num_batches_tracked")]
    extra = [k for k in state if k not in want]
    if missing or extra:
        raise SystemExit(f"{path}: missing {missing[:5]}, unused {extra[:5]}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(want[k].shape):
            raise SystemExit(f"{path}: {k} has shape {tuple(v.shape)}, the model {tuple(want[k].shape)}")
    model.load_state_dict(state, strict=False)


def predictions(model, loader):
    """Top-1 classes on the loader, observers off (in eval mode PyTorch's
    fake quantizers would still observe: their ranges would move with the
    val images); the model is left in eval mode with its observers on."""
    model.eval()
    model.apply(tq.disable_observer)
    out, labels = [], []
    with torch.no_grad():
        for x, y in loader:
            out.append(model(x).argmax(1))
            labels.append(y)
    model.apply(tq.enable_observer)
    return torch.cat(out), torch.cat(labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--fp32", required=True, help="qat FP32 checkpoint (.safetensors)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--csv")
    ap.add_argument("--fx", action="store_true", help="FX graph-mode QAT of the plain torchvision model")
    a = ap.parse_args()
    cfg = yaml.safe_load(open(a.config))
    t, mcfg = cfg["train"], cfg["model"]
    freeze_bn = cfg.get("quant", {}).get("freeze_bn_epoch", 0)
    torch.manual_seed(t.get("seed", 0))
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = "onednn"
    model = quantizable_model(mcfg["name"], mcfg.get("num_classes", 10), mcfg.get("stem", "imagenet"), a.fx)
    load_fp32(model, a.fp32)
    train_loader, val_loader = loaders(cfg, os.path.dirname(os.path.abspath(a.config)))
    pred, labels = predictions(model, val_loader)
    print(f"FP32 checkpoint: val top-1 {100 * (pred == labels).float().mean():.2f}%", flush=True)
    model.train()
    if a.fx:
        size = cfg["data"]["image_size"]
        model = quantize_fx.prepare_qat_fx(model, tq.get_default_qat_qconfig_mapping("onednn"),
                                           (torch.randn(1, 3, size, size),))
    else:
        model.fuse_model(is_qat=True)
        model.qconfig = tq.get_default_qat_qconfig("onednn")
        tq.prepare_qat(model, inplace=True)
    opt = sgd_of(model, t)
    rows = []
    for epoch in range(t["epochs"]):
        if freeze_bn and epoch + 1 >= freeze_bn:
            model.apply(torch.nn.intrinsic.qat.freeze_bn_stats)
        seen, loss_sum, _, secs = train_epoch(model, opt, train_loader, t, epoch)
        pred, labels = predictions(model, val_loader)
        top1 = (pred == labels).float().mean().item()
        rows.append([epoch + 1, loss_sum / seen, top1, seen / secs])
        print(f"epoch {epoch + 1}: train loss {loss_sum / seen:.4f} | fake-quant val top-1 {100 * top1:.2f}% | "
              f"{seen / secs:.1f} img/s", flush=True)
    fq_pred, labels = predictions(model, val_loader)
    int8 = quantize_fx.convert_fx(copy.deepcopy(model).eval()) if a.fx else tq.convert(copy.deepcopy(model).eval())
    q_pred, _ = predictions(int8, val_loader)
    fq, q = (fq_pred == labels).float().mean().item(), (q_pred == labels).float().mean().item()
    agree = (fq_pred == q_pred).float().mean().item()
    print(f"fake-quant val top-1 {100 * fq:.2f}%, int8 (onednn) val top-1 {100 * q:.2f}%, "
          f"top-1 agreement {100 * agree:.2f}% of {labels.numel()} images")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["epoch", "train_loss", "val_top1_fake_quant", "images_per_second"])
            w.writerows(rows)
            w.writerow([])
            w.writerow(["int8_val_top1", q, "agreement", agree])


if __name__ == "__main__":
    main()
