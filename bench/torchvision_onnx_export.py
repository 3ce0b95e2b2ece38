#!/usr/bin/env python3
"""Exports torchvision's ResNet-18 and MobileNetV2 (10 classes, seeded
weights, BN statistics made non-trivial by a few training-mode batches) with
torch.onnx.export both ways a user has them, for qat's ONNX import check
(bench/onnx_import_torchvision.sh):

  NAME_eval.onnx       model.eval(), default export: BN folded into the convs
  NAME_bn.onnx         model.eval(), do_constant_folding=False: BN kept

Also writes input.f32 (2 x 3 x 64 x 64 float32). Run with Debian's PyTorch:
  /usr/bin/python3 bench/torchvision_onnx_export.py OUT_DIR
"""
import os
import sys

import torch
import torchvision


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 64)
    x.numpy().astype("float32").tofile(os.path.join(out, "input.f32"))
    for name, make in (("resnet18", torchvision.models.resnet18), ("mobilenet_v2", torchvision.models.mobilenet_v2)):
        m = make(num_classes=10)
        m.train()
        with torch.no_grad():
            for _ in range(3):
                m(torch.randn(8, 3, 64, 64) * 2 + 0.5)  # running statistics away from 0 and 1
        m.eval()
        for kind, folding in (("eval", True), ("bn", False)):
            path = os.path.join(out, f"{name}_{kind}.onnx")
            torch.onnx.export(m, x, path, opset_version=13, input_names=["input"], output_names=["logits"],
                              dynamic_axes={"input": {0: "n"}, "logits": {0: "n"}},
                              do_constant_folding=folding, training=torch.onnx.TrainingMode.EVAL if folding
                              else torch.onnx.TrainingMode.PRESERVE)
            print("wrote", path)


if __name__ == "__main__":
    main()
