#!/usr/bin/env python3
"""The memory traffic of MobileNetV2's depthwise layers in one training step,
for the share of memory bandwidth they reach (issue 42). With the kernel of
core/ops/depthwise_conv.cpp (Note [depthwise kernel]), per layer (floats):
  forward:  reads x, writes y                           X + Y
  backward: dx reads dy, reads and writes dx (added     Y + 2X
            into the zeroed input gradient); dw reads
            x and dy again                              X + Y
(the padded plane and the output rows stay in cache). Prints the bytes per
step and, given the step's depthwise times from `qat bench --model
mobilenet_v2` ("depthwise (in conv2d.forward)" / "(in conv2d.backward)",
ms), the bandwidth they reach.

  bench/depthwise_traffic.py --stem small --res 32 --batch 32 --fwd-ms 25.4 --bwd-ms 64.3
"""
import argparse

# (expansion t, output channels c, repeats n, stride s): MobileNetV2's stages
STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def depthwise_layers(stem, res):
    """(channels, input side, output side) of each depthwise conv."""
    side = res if stem == "small" else (res + 1) // 2
    cin, layers = 32, []
    for t, c, n, s in STAGES:
        for i in range(n):
            stride = (1 if (stem == "small" and c == 24) else s) if i == 0 else 1
            hidden = cin * t
            out = (side - 1) // stride + 1
            layers.append((hidden, side, out))
            side, cin = out, c
    return layers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stem", default="small")
    ap.add_argument("--res", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fwd-ms", type=float)
    ap.add_argument("--bwd-ms", type=float)
    a = ap.parse_args()
    fwd = bwd = 0
    for c, side, out in depthwise_layers(a.stem, a.res):
        x, y = a.batch * c * side * side * 4, a.batch * c * out * out * 4
        fwd += x + y
        bwd += (y + 2 * x) + (x + y)
    print(f"mobilenet_v2 {a.stem} stem, {a.res} px, batch {a.batch}: depthwise traffic "
          f"{fwd / 1e6:.1f} MB forward, {bwd / 1e6:.1f} MB backward per step")
    if a.fwd_ms and a.bwd_ms:
        print(f"reached: forward {fwd / a.fwd_ms / 1e6:.1f} GB/s, backward {bwd / a.bwd_ms / 1e6:.1f} GB/s")


if __name__ == "__main__":
    main()
