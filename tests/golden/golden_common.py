"""Helpers the golden generators share: the tensor collection they write
(float32 / int32 little-endian, C order, each name once) and the integer
range of a quantization grid."""
import numpy as np
import torch


class GoldenTensors(dict):
    """name -> np.ndarray (float32 or int32), insertion ordered."""

    def __init__(self, strict_float32=False):
        super().__init__()
        self.strict_float32 = strict_float32  # refuse float64 instead of converting it

    def put(self, name, t):
        assert name not in self, name
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        if a.dtype.kind == "f":
            assert not self.strict_float32 or a.dtype == np.float32, f"{name}: expected float32, got {a.dtype}"
            a = a.astype("<f4")
        elif a.dtype.kind in "iub":
            a = a.astype("<i4")
        else:
            raise TypeError(f"{name}: unsupported dtype {a.dtype}")
        self[name] = a.copy(order="C")  # (ascontiguousarray would turn 0-d into 1-d)


def qrange(bits, signed, narrow):
    """(qmin, qmax) of a b-bit grid; narrow drops the most negative value."""
    if signed:
        return (-(1 << (bits - 1)) + (1 if narrow else 0), (1 << (bits - 1)) - 1)
    return (0, (1 << bits) - 1)
