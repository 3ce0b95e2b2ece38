#!/usr/bin/python3
"""Golden values of the graph models' blocks, made by torchvision's own
modules: ResNet's BasicBlock (with its 1x1 downsample, stride 2) and
MobileNetV2's InvertedResidual (expansion 6, with and without the residual
add), in training mode (batch statistics), forward and backward.

Run:  /usr/bin/python3 tests/golden/gen_blocks.py
Writes tests/golden/blocks.safetensors (read by tests/models/test_golden_blocks.cpp).

Each case stores under "<case>.": x, every parameter and BN buffer by
torchvision's state-dict name (before the step), gy, y, dx, d<parameter>
for every parameter, and "after.<buffer>" for the BN running statistics the
forward updated. Parameters are drawn at random (BN weights and biases too,
so that they matter). The block runs in float64 on the float32 values, so the
golden values carry no float32 accumulation error of their own.
"""
import os
import sys

import torch
from torchvision.models.mobilenetv2 import InvertedResidual
from torchvision.models.resnet import BasicBlock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402
from golden_common import GoldenTensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "blocks.safetensors")
torch.manual_seed(20261204)
tensors = GoldenTensors()


def run_case(case, block, x_shape):
    block.train()
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float32) * (0.5 if name.endswith("weight") and p.dim() > 1 else 1))
    for name, t in block.state_dict().items():
        if not name.endswith("num_batches_tracked"):
            tensors.put(f"{case}.{name}", t.float())
    x32 = torch.randn(x_shape, dtype=torch.float32)
    block = block.double()
    x = x32.double().requires_grad_(True)
    y = block(x)
    gy = torch.randn(y.shape, dtype=torch.float32)
    y.backward(gy.double())
    tensors.put(f"{case}.x", x32)
    tensors.put(f"{case}.gy", gy)
    tensors.put(f"{case}.y", y)
    tensors.put(f"{case}.dx", x.grad)
    for name, p in block.named_parameters():
        tensors.put(f"{case}.d{name}", p.grad)
    for name, t in block.state_dict().items():
        if "running" in name:
            tensors.put(f"{case}.after.{name}", t)


downsample = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 1, stride=2, bias=False), torch.nn.BatchNorm2d(8))
run_case("basic_block", BasicBlock(4, 8, stride=2, downsample=downsample), (3, 4, 9, 9))
run_case("inverted_residual", InvertedResidual(8, 8, stride=1, expand_ratio=6), (2, 8, 6, 6))
run_case("inverted_residual_s2", InvertedResidual(8, 16, stride=2, expand_ratio=6), (2, 8, 7, 7))
run_case("inverted_residual_t1", InvertedResidual(16, 8, stride=1, expand_ratio=1), (2, 16, 5, 5))
import torchvision  # noqa: E402
write_safetensors(OUT, tensors, {"generator": "tests/golden/gen_blocks.py", "torch": torch.__version__,
                                 "torchvision": torchvision.__version__})
print(f"wrote {OUT}: {len(tensors)} tensors")
