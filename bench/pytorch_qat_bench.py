#!/usr/bin/env python3
"""PyTorch side of `qat bench --config ...`: the FP32 AlexNet-BN training step
and the same network after eager-mode QAT preparation (Conv+BN+ReLU and
Linear+ReLU fused, fbgemm QAT qconfig: per-channel int8 weights, uint8
activations, moving-average observers), same data, batch and threads.
    /usr/bin/python3 bench/pytorch_qat_bench.py --res 128 --batch 32 --threads 2
"""

import torch
import torch.nn as nn
import torch.ao.quantization as tq

from pytorch_train_bench import alexnet_bn, parse_and_setup, time_steps


class Wrapped(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.quant, self.net, self.dequant = tq.QuantStub(), net, tq.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.net(self.quant(x)))


# Conv+BN+ReLU groups in features, Linear+ReLU in the classifier.
FEATURE_GROUPS = [["0", "1", "2"], ["4", "5", "6"], ["8", "9", "10"], ["11", "12", "13"], ["14", "15", "16"]]
CLASSIFIER_GROUPS = [["1", "2"], ["4", "5"]]


def fuse(net, fuse_fn=tq.fuse_modules_qat):
    """Fuses net in place: fuse_modules_qat (training) or fuse_modules (eval: BN folded)."""
    fuse_fn(net[0], FEATURE_GROUPS, inplace=True)
    fuse_fn(net[3], CLASSIFIER_GROUPS, inplace=True)
    return net


def main():
    a, x, y = parse_and_setup()
    fp32 = time_steps(alexnet_bn(10).train(), x, y, a.steps, a.warmup)
    model = Wrapped(fuse(alexnet_bn(10).train()))
    model.qconfig = tq.get_default_qat_qconfig("fbgemm")
    tq.prepare_qat(model, inplace=True)
    qat = time_steps(model.train(), x, y, a.steps, a.warmup)
    print(f"pytorch {torch.__version__}, {a.threads} threads, {a.res}x{a.res}, batch {a.batch}")
    print(f"train fp32: {fp32:.1f} img/s")
    print(f"train qat: {qat:.1f} img/s")
    print(f"qat/fp32 step time: {fp32 / qat:.3f}")


if __name__ == "__main__":
    main()
