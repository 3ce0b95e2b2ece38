#pragma once
// Quantization parameters (scale, zero point) from an observed range
// (docs/math/fake_quant.md §2), computed as PyTorch 1.13's observers do
// (torch.ao.quantization.observer.UniformQuantizationObserverBase._calculate_qparams),
// in float32 step by step so that the results are bit-identical:
//   the range is first widened to include 0: lo = min(min, 0), hi = max(max, 0)
//   floor = max(spec.min_scale, FLT_EPSILON)     (PyTorch: eps = finfo(f32).eps)
//   minmax, symmetric:  s = max(-lo, hi) / ((qmax - qmin) / 2)   (int8: /127.5, narrow [-127,127]: /127)
//                       s = max(s, floor);  z = 0 (signed), 2^(b-1) (unsigned; PyTorch quint8: 128)
//   minmax, affine:     s = max((hi - lo) / (qmax - qmin), floor)
//                       z = clamp(qmin - round(lo / s), qmin, qmax)   (round: half to even)
//   power_of_two ("Cambricon", always z = 0; needs symmetric):
//                       shift = floor(log2(absmax)) + 1 - m, s = 2^shift, where
//                       m = b - 1 magnitude bits (signed; i.e. floor(log2(absmax)) - (b - 2)), absmax = max(-lo, hi)
//                       m = b (unsigned, z = 0: only [0, hi] is representable), absmax = hi
//                       so 2^(m-1) <= absmax / s < 2^m = qmax + 1: the range [qmin s, qmax s]
//                       covers absmax up to less than one step (clipped by round/clamp).
//                       s is then clamped up to the smallest power of two >= floor; absmax == 0
//                       gives exactly that smallest scale (2^-23 when min_scale <= 2^-23).
//   amax_over_qmax (TensorRT; needs signed symmetric): s = max(max(-lo, hi) / qmax, floor), z = 0
//                       (int8: amax / 127 with [-128, 127], where PyTorch's symmetric int8 divides by 127.5)
// Uninitialised range (min = +inf, max = -inf, an observer that saw nothing):
// s = 1, z = 0 for every channel, as PyTorch (which returns shape (1) even
// for per-channel observers; here the shape stays (C)).
// Deviations from PyTorch, each deliberate:
//   - unsigned symmetric with a custom range: PyTorch uses (qmin + qmax) / 2
//     (127 for quant_min=0, quant_max=255 given explicitly; 128 for its default
//     quint8 range); qat always uses 2^(b-1) (= 128 at 8 bits).
//   - min > max or a non-finite range (input held inf) is a qat::Error here
//     (PyTorch: assertion / inf scale).
#include <cstdint>

#include "core/tensor.h"
#include "quant/spec.h"

namespace qat::quant {

struct QParams {
  Tensor scale;       // f32, shape (1) per-tensor or (C) per-channel
  Tensor zero_point;  // i32, same shape
};

// The smallest scale the spec allows: max(spec.min_scale, FLT_EPSILON).
float scale_floor(const QuantSpec& spec);

// One (scale, zero point) from one range; the per-element core of compute_qparams.
void qparams_from_range(const QuantSpec& spec, float min_val, float max_val, float& scale, int32_t& zero_point);

// min_vals, max_vals: f32, same shape ((1) or (C)); returns tensors of that shape.
QParams compute_qparams(const QuantSpec& spec, const Tensor& min_vals, const Tensor& max_vals);

}  // namespace qat::quant
