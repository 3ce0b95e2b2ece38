#!/usr/bin/env python3
"""Golden values for data/resample.cpp: Pillow's Image.resize(BILINEAR) on a
synthetic RGB image (the same formula as pattern_image() in test_data.cpp),
recorded as the output size and the FNV-1a 64 hash of its bytes (HWC).

Pillow 3.3 to 12.x always run the horizontal pass first; Pillow 13 picks the
pass order itself, which changes some mixed shrink/enlarge results by one
level. data/resample.cpp follows the long-standing order, so record with
Pillow 12:

  python3 -m venv /tmp/pil && /tmp/pil/bin/pip install "pillow==12.0.0"
  /tmp/pil/bin/python tests/data/gen_resize_golden.py > tests/data/resize_golden.txt
"""
import PIL
from PIL import Image

CASES = [  # (in_h, in_w, out_h, out_w)
    (30, 47, 10, 15), (47, 30, 15, 10), (16, 16, 7, 9), (37, 23, 37, 11), (23, 37, 11, 37),
    (100, 75, 80, 60), (13, 200, 5, 77), (20, 30, 45, 67), (5, 6, 64, 64), (224, 224, 144, 144),
    (500, 375, 192, 144), (375, 500, 144, 192), (1000, 700, 652, 456), (144, 192, 128, 128),
    (2, 3, 1, 1), (1, 1, 3, 4), (90, 90, 89, 91), (40, 40, 20, 80), (40, 40, 80, 20),
]


def pattern(h, w):
    data = bytearray(h * w * 3)
    for y in range(h):
        for x in range(w):
            for c in range(3):
                data[(y * w + x) * 3 + c] = (y * 131 + x * 71 + c * 29 + ((x * y) % 17) * 13) % 256
    return Image.frombytes("RGB", (w, h), bytes(data))


def fnv1a(b):
    h = 0xCBF29CE484222325
    for byte in b:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
  print(f"# Pillow {PIL.__version__} Image.resize(BILINEAR): in_h in_w out_h out_w fnv1a64(hex)")
  for ih, iw, oh, ow in CASES:
      out = pattern(ih, iw).resize((ow, oh), Image.BILINEAR)
      print(ih, iw, oh, ow, format(fnv1a(out.tobytes()), "016x"))


if __name__ == "__main__":
    main()
