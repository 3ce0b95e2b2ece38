#!/usr/bin/python3
"""PyTorch eager-mode post-training static quantization of a qat AlexNet checkpoint.

A side-by-side anchor for qat's own post-training quantization: the same FP32
weights, the same validation images and preprocessing, quantized with
PyTorch's stock eager-mode recipe, evaluated in FP32 and in int8.

Run with Debian's /usr/bin/python3 (PyTorch 1.13 CPU, numpy, PIL); no
torchvision and no `safetensors` package are needed.

Model
  qat's `alexnet_bn` (models/models.cpp), the torchvision AlexNet layout with a
  BatchNorm2d (eps 1e-5, momentum 0.1, the PyTorch defaults qat uses) after
  every conv and no conv bias:
    features   0 conv 3->64 k11 s4 p2, 1 BN, 2 ReLU, 3 maxpool k3 s2,
               4 conv 64->192 k5 p2, 5 BN, 6 ReLU, 7 maxpool k3 s2,
               8 conv 192->384 k3 p1, 9 BN, 10 ReLU,
               11 conv 384->256 k3 p1, 12 BN, 13 ReLU,
               14 conv 256->256 k3 p1, 15 BN, 16 ReLU, 17 maxpool k3 s2
    avgpool    adaptive average pool to 6x6;  flatten
    classifier 0 dropout 0.5, 1 linear 9216->4096, 2 ReLU, 3 dropout 0.5,
               4 linear 4096->4096, 5 ReLU, 6 linear 4096->num_classes
  Max-pools have no padding and floor mode, as qat's. The plain `alexnet`
  (convs with bias, no BN) is recognised too, from the checkpoint's keys.
  num_classes comes from the checkpoint (classifier.6.weight).

Checkpoint
  qat's safetensors file (8-byte little-endian header length, JSON header,
  raw little-endian data) read with numpy. Training checkpoints hold the model
  under "model.<name>" and the optimizer under "optim.<...>"; the optim keys
  are skipped (and counted). Any model tensor in the file that the PyTorch
  model does not use, any model tensor the file lacks, and any shape or dtype
  mismatch is an error naming the key (exit status 1). The one exception:
  PyTorch's BatchNorm `num_batches_tracked` counters, which qat does not keep
  and which eval mode never reads; they are set to 0 and listed.

Data (qat's validation transform, data/transforms.cpp and data/image.cpp)
  ImageFolder layout <root>/<class>/<image>: classes are the sub-folders sorted
  by name, images the files with extension jpg/jpeg/png (any case) sorted by
  name, hidden entries ignored. Per image: decode to RGB, resize so the shorter
  side is 144 (longer side floor(144 * long / short)) with PIL's BILINEAR
  filter, centre crop 128 (offset round-half-even of (size - 128) / 2), then
  (pixel / 255 - mean) / std in float32 with mean (0.485, 0.456, 0.406) and
  std (0.229, 0.224, 0.225).
  How close this is to qat: qat's resize (data/resample.cpp) states that it is
  bit-exact with Pillow's BILINEAR resize on 8-bit RGB (Pillow 3.3 to 12.x),
  so PIL's resize stands in for it; treat it as an approximation all the same,
  since this script does not check that claim. The decoder certainly differs:
  qat decodes with stb_image, PIL with libjpeg(-turbo), and the two can differ
  by a level or two in some pixels. `--decoder stb` decodes through Debian's
  libstb.so (ctypes) to take that difference away; the default is PIL.

Evaluation
  FP32 top-1/top-5 of the loaded model in eval mode on the val folder, then the
  same for the int8 model. --val-limit N evaluates a class-balanced
  deterministic subset instead (round robin over the classes in sorted order:
  the first image of every class, then the second, ...).

Quantization (torch.ao.quantization, eager mode, post-training static)
  * fuse conv+BN+ReLU (BN folded into the conv) and linear+ReLU (classifier 1+2
    and 4+5); the last linear stays alone;
  * a QuantStub at the input and a DeQuantStub at the output;
  * qconfig: activations HistogramObserver(reduce_range=True), quint8
    per-tensor affine, i.e. a 7-bit range [0, 127] exactly as fbgemm's default
    qconfig (get_default_qconfig("fbgemm")) sets it; weights
    PerChannelMinMaxObserver(dtype=qint8, qscheme=per_channel_symmetric), per
    output channel. --no-reduce-range uses the full [0, 255] activation range
    (onednn's and qnnpack's default) instead;
  * calibration: --images N train images (default 512), class-balanced (N //
    C per class, the remaining N % C images one each from classes drawn by the
    seed), picked at random with numpy's default_rng(--seed) and run through
    the validation transform (no augmentation), in class round-robin order;
  * convert, then evaluate.
  Engine: fbgemm as asked, when this PyTorch has it. Debian's PyTorch 1.13 is
  built without FBGEMM (supported engines: qnnpack, onednn), so `--engine
  auto` (the default) falls back to onednn, the x86 oneDNN int8 kernels, and
  says so; the qconfig stays fbgemm's, so the quantization grid is the same
  and only the int8 kernels differ. --engine fbgemm fails where fbgemm is
  missing.
  Times: calibration time and eval times count the forward passes only; image
  decoding and preprocessing are timed separately (data_prep_s). Threads:
  torch.set_num_threads(--threads).

Output
  A summary on stdout and a JSON file (--out, default pytorch_ptq.json next to
  this script, i.e. results/ptq/pytorch_ptq.json) with the accuracies, times,
  versions, qconfig, engine, calibration images, per-layer output scales and
  zero points, and the checkpoint's path, size and metadata.

Example (the full run)
  /usr/bin/python3 results/ptq/pytorch_ptq.py \\
      --checkpoint runs/fp32_3ep/best.safetensors
"""

import argparse
import copy
import ctypes
import ctypes.util
import datetime
import hashlib
import io
import json
import os
import platform
import struct
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.ao.quantization as tq
from PIL import Image
import PIL

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(SCRIPT_DIR, "pytorch_ptq.json")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------
# safetensors (numpy only)

_ST_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
    "BF16": np.dtype("<u2"),  # widened to float32 below
}


class CheckpointError(Exception):
    pass


def read_safetensors(path, want=lambda name: True):
    """Returns (tensors {name: np.ndarray}, metadata {str: str}, all_names).

    Only the tensors for which want(name) is true are read from disk."""
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path}: too short for a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n == 0 or 8 + n > file_size:
            raise CheckpointError(f"{path}: header length {n} does not fit the file ({file_size} bytes)")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path}: bad JSON header: {e}") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{path}: the header is not a JSON object")
        metadata = header.pop("__metadata__", {}) or {}
        data_start = 8 + n
        data_len = file_size - data_start
        tensors = {}
        for name in sorted(header):
            info = header[name]
            if not isinstance(info, dict):
                raise CheckpointError(f"{path}: header entry '{name}' is not an object")
            dtype_name = info.get("dtype")
            shape = [int(s) for s in info.get("shape", [])]
            begin, end = (int(v) for v in info.get("data_offsets", (-1, -1)))
            if dtype_name not in _ST_DTYPES:
                raise CheckpointError(f"{path}: tensor '{name}' has unsupported dtype {dtype_name}")
            dt = _ST_DTYPES[dtype_name]
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if not (0 <= begin <= end <= data_len) or end - begin != count * dt.itemsize:
                raise CheckpointError(
                    f"{path}: tensor '{name}' ({dtype_name} {shape}) has bad data_offsets [{begin}, {end}] "
                    f"(data section {data_len} bytes)")
            if not want(name):
                continue
            f.seek(data_start + begin)
            buf = f.read(end - begin)
            arr = np.frombuffer(buf, dtype=dt, count=count).reshape(shape)
            if dtype_name == "BF16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            tensors[name] = (dtype_name, arr.copy())
    return tensors, metadata, sorted(header)


# ---------------------------------------------------------------------------
# model


class AlexNet(nn.Module):
    """qat's alexnet / alexnet_bn (models/models.cpp) with quant/dequant stubs
    (identities until the model is prepared and converted)."""

    def __init__(self, num_classes, batch_norm=True):
        super().__init__()
        self.batch_norm = batch_norm
        layers = []

        def conv_block(cin, cout, k, stride, pad):
            layers.append(nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1))
            layers.append(nn.ReLU(inplace=False))

        conv_block(3, 64, 11, 4, 2)
        layers.append(nn.MaxPool2d(3, 2))
        conv_block(64, 192, 5, 1, 2)
        layers.append(nn.MaxPool2d(3, 2))
        conv_block(192, 384, 3, 1, 1)
        conv_block(384, 256, 3, 1, 1)
        conv_block(256, 256, 3, 1, 1)
        layers.append(nn.MaxPool2d(3, 2))
        self.quant = tq.QuantStub()
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.flatten = nn.Flatten(1)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=False),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=False),
            nn.Linear(4096, num_classes),
        )
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        x = self.features(x)
        x = self.avgpool(x)
        x = self.flatten(x)
        x = self.classifier(x)
        return self.dequant(x)


def fusion_groups(model):
    """[[names...]] for conv+BN+ReLU, conv+ReLU and linear+ReLU runs."""
    groups = []
    for seq_name in ("features", "classifier"):
        mods = list(getattr(model, seq_name).named_children())
        i = 0
        while i < len(mods):
            name, m = mods[i]
            nxt = [mm for _, mm in mods[i + 1:i + 3]]
            if isinstance(m, nn.Conv2d) and len(nxt) >= 2 and isinstance(nxt[0], nn.BatchNorm2d) \
                    and isinstance(nxt[1], nn.ReLU):
                groups.append([f"{seq_name}.{mods[i + k][0]}" for k in range(3)])
                i += 3
                continue
            if isinstance(m, (nn.Conv2d, nn.Linear)) and nxt and isinstance(nxt[0], nn.ReLU):
                groups.append([f"{seq_name}.{mods[i + k][0]}" for k in range(2)])
                i += 2
                continue
            i += 1
    return groups


def load_qat_checkpoint(path):
    """Builds the model from a qat checkpoint. Returns (model, info dict)."""
    header_only, metadata, names = read_safetensors(path, want=lambda n: False)
    del header_only
    prefixed = any(n.startswith("model.") for n in names)
    prefix = "model." if prefixed else ""
    model_names = [n for n in names if n.startswith(prefix)]
    other_names = [n for n in names if not n.startswith(prefix)]
    tensors, _, _ = read_safetensors(path, want=lambda n: n.startswith(prefix))
    tensors = {n[len(prefix):]: v for n, v in tensors.items()}

    batch_norm = "features.1.running_mean" in tensors
    if "classifier.6.weight" not in tensors:
        raise CheckpointError(f"{path}: no '{prefix}classifier.6.weight': not a qat alexnet/alexnet_bn checkpoint "
                              f"(model keys: {', '.join(sorted(tensors)[:8])}...)")
    num_classes = int(tensors["classifier.6.weight"][1].shape[0])
    model = AlexNet(num_classes, batch_norm=batch_norm)
    sd = model.state_dict()

    errors, filled = [], []
    unused = sorted(set(tensors) - set(sd))
    for k in unused:
        errors.append(f"checkpoint key '{prefix}{k}' is not used by the model")
    new_sd = {}
    for k, ref in sd.items():
        if k not in tensors:
            if k.endswith("num_batches_tracked"):
                new_sd[k] = torch.zeros_like(ref)
                filled.append(k)
            else:
                errors.append(f"model key '{k}' is missing from the checkpoint (expected '{prefix}{k}')")
            continue
        dtype_name, arr = tensors[k]
        if tuple(arr.shape) != tuple(ref.shape):
            errors.append(f"'{prefix}{k}': checkpoint shape {list(arr.shape)} != model shape {list(ref.shape)}")
            continue
        if dtype_name not in ("F32", "F16", "BF16", "F64"):
            errors.append(f"'{prefix}{k}': dtype {dtype_name} where a float tensor is expected")
            continue
        new_sd[k] = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
    if errors:
        for e in errors:
            log("ERROR:", e)
        raise CheckpointError(f"{path}: {len(errors)} key error(s), see above")
    model.load_state_dict(new_sd, strict=True)
    model.eval()
    info = {
        "model": "alexnet_bn" if batch_norm else "alexnet",
        "num_classes": num_classes,
        "model_tensors_loaded": len(tensors),
        "other_tensors_skipped": len(other_names),
        "other_prefixes_skipped": sorted({n.split(".")[0] for n in other_names}),
        "filled_with_zero": filled,
        "metadata": metadata,
    }
    return model, info


# ---------------------------------------------------------------------------
# data


class StbDecoder:
    """stb_image through Debian's libstb.so, as qat decodes (data/image.cpp)."""

    def __init__(self):
        name = ctypes.util.find_library("stb") or "libstb.so.0"
        self.lib = ctypes.CDLL(name)
        self.lib.stbi_load.restype = ctypes.POINTER(ctypes.c_ubyte)
        self.lib.stbi_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                                       ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        self.lib.stbi_image_free.argtypes = [ctypes.c_void_p]
        self.lib.stbi_failure_reason.restype = ctypes.c_char_p

    def __call__(self, path):
        w, h, c = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        p = self.lib.stbi_load(path.encode(), ctypes.byref(w), ctypes.byref(h), ctypes.byref(c), 3)
        if not p:
            reason = self.lib.stbi_failure_reason()
            raise RuntimeError(f"stb_image cannot decode '{path}': {reason.decode() if reason else '?'}")
        try:
            arr = np.ctypeslib.as_array(p, shape=(h.value * w.value * 3,)).copy()
        finally:
            self.lib.stbi_image_free(ctypes.cast(p, ctypes.c_void_p))
        return Image.fromarray(arr.reshape(h.value, w.value, 3), "RGB")


def pil_decode(path):
    with Image.open(path) as im:
        return im.convert("RGB")


def make_lut(mean, std):
    # float32 throughout, as qat's write_normalized (and ToTensor + Normalize).
    v = np.arange(256, dtype=np.float32) / np.float32(255.0)
    return np.stack([(v - np.float32(m)) / np.float32(s) for m, s in zip(mean, std)]).astype(np.float32)


def center_offset(size, crop):
    if crop > size:
        return -((crop - size) // 2)
    return int(round((size - crop) / 2.0))  # Python round: half to even, as qat


class ValTransform:
    def __init__(self, resize, crop, decoder):
        self.resize, self.crop, self.decode = resize, crop, decoder
        self.lut = make_lut(MEAN, STD)

    def __call__(self, path):
        img = self.decode(path)
        w, h = img.size
        if self.resize > 0:
            if h <= w:
                nh, nw = self.resize, self.resize * w // h
            else:
                nh, nw = self.resize * h // w, self.resize
            if (nw, nh) != (w, h):
                img = img.resize((nw, nh), Image.BILINEAR)
            w, h = nw, nh
        a = np.asarray(img, dtype=np.uint8)
        S = self.crop
        top, left = center_offset(h, S), center_offset(w, S)
        out = np.zeros((S, S, 3), dtype=np.uint8)  # zero (black) outside the image, as qat
        y0, y1 = max(top, 0), min(top + S, h)
        x0, x1 = max(left, 0), min(left + S, w)
        if y1 > y0 and x1 > x0:
            out[y0 - top:y1 - top, x0 - left:x1 - left] = a[y0:y1, x0:x1]
        chw = out.transpose(2, 0, 1)
        return np.stack([self.lut[c][chw[c]] for c in range(3)])


def list_image_folder(root):
    if not os.path.isdir(root):
        sys.exit(f"error: '{root}' is not a folder")
    classes = sorted(d for d in os.listdir(root) if not d.startswith(".") and os.path.isdir(os.path.join(root, d)))
    if not classes:
        sys.exit(f"error: '{root}' has no class folders")
    per_class = []
    for c in classes:
        files = sorted(f for f in os.listdir(os.path.join(root, c))
                       if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)
                       and os.path.isfile(os.path.join(root, c, f)))
        if not files:
            sys.exit(f"error: class folder '{os.path.join(root, c)}' holds no image")
        per_class.append([os.path.join(root, c, f) for f in files])
    return classes, per_class


def round_robin(per_class, limit):
    """(path, label) pairs: all in class order when limit <= 0, else the first
    `limit` of a round robin over the classes."""
    if limit <= 0:
        return [(p, lab) for lab, files in enumerate(per_class) for p in files]
    out, i = [], 0
    while len(out) < limit and any(i < len(f) for f in per_class):
        for lab, files in enumerate(per_class):
            if i < len(files) and len(out) < limit:
                out.append((files[i], lab))
        i += 1
    return out


def calibration_set(per_class, n, seed):
    rng = np.random.default_rng(seed)
    C = len(per_class)
    quota = [n // C] * C
    for c in rng.permutation(C)[: n % C]:
        quota[int(c)] += 1
    chosen = []
    for lab, files in enumerate(per_class):
        if quota[lab] > len(files):
            sys.exit(f"error: calibration wants {quota[lab]} images of class {lab} but it has {len(files)}")
        idx = rng.choice(len(files), size=quota[lab], replace=False)
        chosen.append([files[int(i)] for i in idx])
    out, i = [], 0
    while any(i < len(c) for c in chosen):
        for lab, files in enumerate(chosen):
            if i < len(files):
                out.append((files[i], lab))
        i += 1
    return out, quota


def load_samples(samples, transform, what):
    t0 = time.perf_counter()
    x = torch.empty((len(samples), 3, transform.crop, transform.crop), dtype=torch.float32)
    y = torch.empty(len(samples), dtype=torch.int64)
    for i, (p, lab) in enumerate(samples):
        x[i] = torch.from_numpy(transform(p))
        y[i] = lab
    dt = time.perf_counter() - t0
    log(f"  {what}: {len(samples)} images decoded and transformed in {dt:.1f} s")
    return x, y, dt


# ---------------------------------------------------------------------------
# evaluation


@torch.no_grad()
def evaluate(model, x, y, batch_size, k=5):
    model.eval()
    k = min(k, model_num_classes(model))
    top1 = topk = 0
    preds = []
    t0 = time.perf_counter()
    for s in range(0, x.shape[0], batch_size):
        logits = model(x[s:s + batch_size])
        tk = logits.topk(k, dim=1).indices
        yy = y[s:s + batch_size]
        top1 += int((tk[:, 0] == yy).sum())
        topk += int((tk == yy[:, None]).any(dim=1).sum())
        preds.append(tk[:, 0])
    dt = time.perf_counter() - t0
    n = x.shape[0]
    return {"top1": top1 / n, "top5": topk / n, "correct_top1": top1, "correct_top5": topk, "images": n,
            "eval_s": dt, "images_per_s": n / dt if dt > 0 else None}, torch.cat(preds)


def model_num_classes(model):
    last = model.classifier[6]
    return int(last.out_features) if hasattr(last, "out_features") else int(last.weight().shape[0])


def describe_observer(factory):
    obs = factory()
    d = {"class": type(obs).__name__, "dtype": str(obs.dtype), "qscheme": str(obs.qscheme),
         "reduce_range": bool(getattr(obs, "reduce_range", False)),
         "quant_min": int(obs.quant_min), "quant_max": int(obs.quant_max)}
    if hasattr(obs, "ch_axis"):
        d["ch_axis"] = int(obs.ch_axis)
    if hasattr(obs, "bins"):
        d["bins"] = int(obs.bins)
    return d


def quant_params(qmodel):
    """Output scale/zero point of every quantizing module, and weight scale ranges."""
    rows = []
    for name, m in qmodel.named_modules():
        if not name or not hasattr(m, "scale") or not hasattr(m, "zero_point"):
            continue
        row = {"module": name, "type": f"{type(m).__module__}.{type(m).__name__}", "out_scale": float(m.scale),
               "out_zero_point": int(m.zero_point)}
        if callable(getattr(m, "weight", None)):
            w = m.weight()
            if w.qscheme() in (torch.per_channel_symmetric, torch.per_channel_affine):
                s = w.q_per_channel_scales()
                row["weight_scale_min"], row["weight_scale_max"] = float(s.min()), float(s.max())
            else:
                row["weight_scale_min"] = row["weight_scale_max"] = float(w.q_scale())
        rows.append(row)
    return rows


def state_dict_bytes(model):
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell()


def pick_engine(requested):
    supported = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if requested == "auto":
        for e in ("fbgemm", "x86", "onednn", "qnnpack"):
            if e in supported:
                if e != "fbgemm":
                    log(f"WARNING: this PyTorch has no fbgemm quantized engine (supported: {', '.join(supported)}); "
                        f"using '{e}' with fbgemm's qconfig")
                return e
        sys.exit(f"error: no quantized engine available (supported: {supported})")
    if requested not in supported:
        sys.exit(f"error: quantized engine '{requested}' is not supported by this PyTorch "
                 f"(supported: {', '.join(supported)}); try --engine auto")
    return requested


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="qat FP32 alexnet_bn .safetensors")
    ap.add_argument("--train", default="/work/shared/datasets/imagenette/train")
    ap.add_argument("--val", default="/work/shared/datasets/imagenette/val")
    ap.add_argument("--images", type=int, default=512, help="calibration images from --train (default 512)")
    ap.add_argument("--seed", type=int, default=0, help="calibration image choice (default 0)")
    ap.add_argument("--val-limit", type=int, default=0,
                    help="evaluate a class-balanced subset of N val images (0 = all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--resize", type=int, default=144)
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--decoder", choices=("pil", "stb"), default="pil",
                    help="JPEG decoder: PIL (default) or stb_image via libstb.so, as qat")
    ap.add_argument("--engine", default="auto",
                    help="quantized engine: auto (fbgemm if available, else onednn), fbgemm, onednn, qnnpack, x86")
    ap.add_argument("--no-reduce-range", action="store_true",
                    help="activations over [0,255] instead of fbgemm's reduce_range [0,127]")
    ap.add_argument("--out", default=DEFAULT_OUT, help="JSON results (default: %(default)s)")
    args = ap.parse_args()
    if args.images < 1:
        sys.exit("error: --images must be >= 1")

    warnings.filterwarnings("ignore", message=".*reduce_range will be deprecated.*")
    warnings.filterwarnings("ignore", message=".*must run observer before calling calculate_qparams.*")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    engine = pick_engine(args.engine)
    torch.backends.quantized.engine = engine

    log(f"PyTorch {torch.__version__}, numpy {np.__version__}, PIL {PIL.__version__}; "
        f"threads {torch.get_num_threads()}; quantized engine {engine}")

    # 1. checkpoint
    ckpt = os.path.abspath(args.checkpoint)
    ckpt_size = os.path.getsize(ckpt)
    log(f"checkpoint {ckpt} ({ckpt_size} bytes)")
    try:
        model, ckinfo = load_qat_checkpoint(ckpt)
    except CheckpointError as e:
        log("ERROR:", e)
        return 1
    log(f"  {ckinfo['model']}, {ckinfo['num_classes']} classes, {ckinfo['model_tensors_loaded']} model tensors "
        f"loaded, {ckinfo['other_tensors_skipped']} non-model tensors skipped "
        f"({', '.join(ckinfo['other_prefixes_skipped']) or '-'}); "
        f"set to 0 (not in qat): {len(ckinfo['filled_with_zero'])} num_batches_tracked")
    md = ckinfo["metadata"]
    if md:
        log("  metadata: " + ", ".join(f"{k}={md[k]}" for k in ("format", "epoch", "best_top1") if k in md))

    # 2. data
    decoder = StbDecoder() if args.decoder == "stb" else pil_decode
    transform = ValTransform(args.resize, args.image_size, decoder)
    val_classes, val_files = list_image_folder(args.val)
    train_classes, train_files = list_image_folder(args.train)
    if val_classes != train_classes:
        sys.exit("error: --train and --val have different class folders")
    if len(val_classes) != ckinfo["num_classes"]:
        sys.exit(f"error: the checkpoint has {ckinfo['num_classes']} outputs but the data has "
                 f"{len(val_classes)} classes")
    val_samples = round_robin(val_files, args.val_limit)
    calib_samples, quota = calibration_set(train_files, args.images, args.seed)
    log(f"data ({args.decoder} decoder, resize {args.resize}, centre crop {args.image_size}):")
    xv, yv, val_prep_s = load_samples(val_samples, transform, f"val {args.val}")
    xc, _, calib_prep_s = load_samples(calib_samples, transform, f"calibration {args.train}")

    # 3. FP32
    fp32, fp32_pred = evaluate(model, xv, yv, args.batch_size)
    log(f"FP32: top-1 {100 * fp32['top1']:.2f}%  top-5 {100 * fp32['top5']:.2f}%  "
        f"({fp32['images']} images, {fp32['eval_s']:.1f} s)")

    # 4. post-training static quantization
    act_factory = tq.HistogramObserver.with_args(reduce_range=not args.no_reduce_range)
    w_factory = tq.PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
    qconfig = tq.QConfig(activation=act_factory, weight=w_factory)
    qmodel = copy.deepcopy(model).eval()
    groups = fusion_groups(qmodel)
    tq.fuse_modules(qmodel, groups, inplace=True)
    qmodel.qconfig = qconfig
    tq.prepare(qmodel, inplace=True)
    t0 = time.perf_counter()
    with torch.no_grad():
        for s in range(0, xc.shape[0], args.batch_size):
            qmodel(xc[s:s + args.batch_size])
    calib_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tq.convert(qmodel, inplace=True)
    convert_s = time.perf_counter() - t0
    log(f"PTQ: fused {groups}; calibrated on {xc.shape[0]} train images in {calib_s:.1f} s; "
        f"converted in {convert_s:.2f} s")

    int8, int8_pred = evaluate(qmodel, xv, yv, args.batch_size)
    agree = float((int8_pred == fp32_pred).float().mean())
    log(f"INT8: top-1 {100 * int8['top1']:.2f}%  top-5 {100 * int8['top5']:.2f}%  "
        f"({int8['images']} images, {int8['eval_s']:.1f} s)")

    # 5. summary and JSON
    log("")
    log("summary")
    log(f"  checkpoint       {ckpt}")
    log(f"  val images       {fp32['images']} ({'all' if args.val_limit <= 0 else f'limit {args.val_limit}'})")
    log(f"  FP32             top-1 {100 * fp32['top1']:6.2f}%  top-5 {100 * fp32['top5']:6.2f}%  "
        f"eval {fp32['eval_s']:.1f} s")
    log(f"  INT8 ({engine})".ljust(19) + f"top-1 {100 * int8['top1']:6.2f}%  top-5 {100 * int8['top5']:6.2f}%  "
        f"eval {int8['eval_s']:.1f} s")
    log(f"  top-1 change     {100 * (int8['top1'] - fp32['top1']):+.2f} points; "
        f"top-1 prediction agreement {100 * agree:.2f}%")
    log(f"  calibration      {xc.shape[0]} images, {calib_s:.1f} s; "
        f"act HistogramObserver reduce_range={not args.no_reduce_range}, "
        f"weight per-channel symmetric qint8")

    result = {
        "script": os.path.relpath(os.path.abspath(__file__), os.getcwd()),
        "command": [sys.executable] + sys.argv,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                     "pil": PIL.__version__},
        "threads": torch.get_num_threads(),
        "checkpoint": {"path": args.checkpoint, "abspath": ckpt, "size_bytes": ckpt_size, **ckinfo},
        "data": {
            "train": args.train, "val": args.val, "classes": val_classes, "decoder": args.decoder,
            "transform": f"decode RGB ({args.decoder}); resize shorter side to {args.resize} (PIL BILINEAR, "
                         f"longer side floored); centre crop {args.image_size}; x/255; normalise mean {list(MEAN)} "
                         f"std {list(STD)}",
            "val_limit": args.val_limit, "val_images": len(val_samples),
            "val_selection": "all, sorted" if args.val_limit <= 0 else "round robin over classes, sorted files",
            "val_prep_s": val_prep_s,
        },
        "fp32": fp32,
        "int8": {**int8, "top1_change": int8["top1"] - fp32["top1"], "top1_agreement_with_fp32": agree,
                 "state_dict_bytes": state_dict_bytes(qmodel)},
        "fp32_state_dict_bytes": state_dict_bytes(model),
        "ptq": {
            "api": "torch.ao.quantization eager mode: fuse_modules, prepare, calibrate, convert",
            "engine_requested": args.engine, "engine": engine,
            "supported_engines": list(torch.backends.quantized.supported_engines),
            "qconfig": {"activation": describe_observer(act_factory), "weight": describe_observer(w_factory),
                        "repr": str(qconfig),
                        "note": "fbgemm's default qconfig (reduce_range=True activations)"
                        if not args.no_reduce_range else "reduce_range=False (full 8-bit activations)"},
            "fused": groups,
            "calibration_images": int(xc.shape[0]),
            "calibration_seed": args.seed,
            "calibration_per_class": quota,
            "calibration_files": [os.path.relpath(p, args.train) for p, _ in calib_samples],
            "calibration_files_sha256": hashlib.sha256(
                "\n".join(os.path.relpath(p, args.train) for p, _ in calib_samples).encode()).hexdigest(),
            "calibration_transform": "validation transform (no augmentation)",
            "calibration_s": calib_s, "calibration_prep_s": calib_prep_s, "convert_s": convert_s,
            "batch_size": args.batch_size,
            "quant_params": quant_params(qmodel),
        },
    }
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, out)
    log(f"  results          {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
