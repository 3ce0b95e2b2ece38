#!/usr/bin/python3
"""Golden training run for qat's small_cnn, made by PyTorch.

Run:  /usr/bin/python3 tests/golden/gen_training.py
Writes tests/golden/training_small_cnn.safetensors (read by
tests/models/test_golden_training.cpp).

The model is the PyTorch equivalent of qat's SmallCNN (models/models.cpp) with
the same state_dict names:
  features = Conv2d(3,8,3,p=1,bias=False), BatchNorm2d(8), ReLU, MaxPool2d(2,2),
             Conv2d(8,16,3,p=1,bias=False), BatchNorm2d(16), ReLU,
             AdaptiveAvgPool2d(1), Flatten
  fc       = Linear(16, 5)
It is trained for STEPS steps of SGD(lr=0.1, momentum=0.9, nesterov=False,
weight_decay=1e-3 on every parameter) with cross_entropy(label_smoothing=0.1),
in train mode, each step on its own batch. Everything runs in float32, as
PyTorch normally trains (no float64 reference: the test compares whole
trajectories, so it has to tolerate float32 op-order differences anyway).

Stored (F32 unless noted):
  init.<name>      the state before training (parameters and BN running stats;
                   PyTorch's num_batches_tracked is left out: qat has none)
  batch<i>.x       (8,3,12,12) input of step i, i = 0..STEPS-1
  batch<i>.y       (8,) I32 targets of step i
  loss             [STEPS] the loss of every step (before that step's update)
  final.<name>     the state after the last step
  eval.x           (8,3,12,12) a fresh input
  eval.logits      (8,5) the trained model's eval-mode logits for eval.x
The file is written by hand (no dependency on the `safetensors` package):
8-byte LE header length, JSON header, raw bytes.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_writer import write_safetensors  # noqa: E402
from golden_common import GoldenTensors  # noqa: E402
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "training_small_cnn.safetensors")

STEPS = 6
BATCH = 8
NUM_CLASSES = 5
LR, MOMENTUM, WEIGHT_DECAY = 0.1, 0.9, 1e-3
LABEL_SMOOTHING = 0.1

torch.manual_seed(20240612)
torch.set_num_threads(1)  # deterministic reduction order from run to run
tensors = GoldenTensors(strict_float32=True)
put = tensors.put



class SmallCNN(nn.Module):
    def __init__(self, in_channels=3, num_classes=NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1, bias=False),  # 0
            nn.BatchNorm2d(8),  # 1
            nn.ReLU(),  # 2
            nn.MaxPool2d(2, 2),  # 3
            nn.Conv2d(8, 16, 3, padding=1, bias=False),  # 4
            nn.BatchNorm2d(16),  # 5
            nn.ReLU(),  # 6
            nn.AdaptiveAvgPool2d(1),  # 7
            nn.Flatten(),  # 8
        )
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc(self.features(x))


def put_state(prefix, model):
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        put(prefix + name, t)


model = SmallCNN()
# Give the BN layers non-trivial affine parameters and running stats, so the
# test also checks that they are loaded and updated (defaults are 1/0/0/1).
with torch.no_grad():
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.copy_(1.0 + 0.2 * torch.randn_like(m.weight))
            m.bias.copy_(0.1 * torch.randn_like(m.bias))
            m.running_mean.copy_(0.1 * torch.randn_like(m.running_mean))
            m.running_var.copy_(1.0 + 0.5 * torch.rand_like(m.running_var))
model.train()
put_state("init.", model)

opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, dampening=0, nesterov=False,
                      weight_decay=WEIGHT_DECAY)
losses = []
for i in range(STEPS):
    x = torch.randn(BATCH, 3, 12, 12) * 1.5 + 0.2
    y = torch.randint(0, NUM_CLASSES, (BATCH,))
    put(f"batch{i}.x", x)
    put(f"batch{i}.y", y.to(torch.int32))
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y, label_smoothing=LABEL_SMOOTHING)
    loss.backward()
    opt.step()
    losses.append(loss.item())
put("loss", torch.tensor(losses, dtype=torch.float32))
put_state("final.", model)

model.eval()
x = torch.randn(BATCH, 3, 12, 12) * 1.5 + 0.2
with torch.no_grad():
    logits = model(x)
put("eval.x", x)
put("eval.logits", logits)


# ---------------------------------------------------------------- write


write_safetensors(OUT, tensors, {"generator": "tests/golden/gen_training.py", "torch": torch.__version__,
                                 "steps": str(STEPS), "precision": "float32"})
print(f"wrote {OUT}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")
print("losses:", " ".join(f"{v:.6f}" for v in losses))
