"""The one safetensors writer the golden generators share (numpy + json, no
dependency on the `safetensors` package): 8-byte little-endian header length,
the JSON header padded to 8 bytes, then the raw C-order bytes. Written to a
temporary file and renamed, like qat's own writer."""
import json
import os
import struct


def write_safetensors(path, arrays, metadata):
    header, blobs, off = {}, [], 0
    for name, a in arrays.items():
        raw = a.tobytes(order="C")
        header[name] = {"dtype": {"f": "F32", "i": "I32"}[a.dtype.kind], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * (-len(hj) % 8)  # pad so the data starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
