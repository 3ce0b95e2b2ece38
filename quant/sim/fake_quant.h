#pragma once
// Fake quantization (docs/math/fake_quant.md §4-5): quantize and dequantize in one pass,
// float in, float out, per-tensor or per-channel (spec.per_channel, spec.axis):
//   q = nearbyint(x * inv_s) + z        inv_s = 1.0f / s (float32), round half to even
//   y = (clamp(q, qmin, qmax) - z) * s
// computed exactly as PyTorch 1.13's CPU kernels
// (fake_quantize_per_tensor_affine / fake_quantize_per_channel_affine, the
// "cachemask" variants): bit-identical outputs and masks for every finite x
// with |x * inv_s| < 2^63. Deliberate deviations: NaN stays NaN and +-inf (or
// |x * inv_s| >= 2^63) clamps to the right end; PyTorch casts such values to
// int64 (undefined behaviour, INT64_MIN on x86) and outputs qmin.
//
// Shapes: x f32, any shape; scale f32 and zero_point i32 of shape (1) per-tensor
// (or 0-d) or (C) per-channel with C = x.size(spec.axis). Devices: CPU, or
// cuda (the twin quant/sim/fake_quant.cu: the same outputs and masks, bit for
// bit, the mask as bytes); scale and zero_point on x's device or on the CPU
// (they are read on the host either way: a quantizer keeps them there, as
// PyTorch lets CPU scalars meet cuda tensors). scale > 0 and finite,
// qmin <= zero_point <= qmax (checked, like PyTorch). scale and zero_point get
// no gradient (the learned step size is quant/sim/lsq's job).
// Backward (writes a fresh dx, no accumulation):
//   SteKind::clipped (PyTorch): dx = dy * [qmin <= q <= qmax] (q before the
//     clamp, as PyTorch's mask); saves a 1-byte mask per element.
//   SteKind::plain (OneFlow's demo): dx = dy; saves nothing.
// Cost: one vectorised pass (AVX-512 where -march allows), OpenMP over
// blocks/channels above detail::kParallelGrain elements; allocates only y (and
// the mask when a gradient is needed with the clipped STE).
#include "core/tensor.h"
#include "quant/observe/observer.h"
#include "quant/qparams.h"
#include "quant/spec.h"

namespace qat::quant {

Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, const QuantSpec& spec,
                     SteKind ste = SteKind::clipped);
inline Tensor fake_quantize(const Tensor& x, const QParams& q, const QuantSpec& spec,
                            SteKind ste = SteKind::clipped) {
  return fake_quantize(x, q.scale, q.zero_point, spec, ste);
}

// What a QAT forward does with one tensor, as PyTorch's FakeQuantize module:
// obs.observe(x) (a no-op while obs.enabled is false), qparams from the
// observer's state, then fake_quantize(x) with them under obs.spec().
// `used` (optional) receives the qparams applied.
Tensor observe_and_fake_quantize(Observer& obs, const Tensor& x, SteKind ste = SteKind::clipped,
                                 QParams* used = nullptr);

}  // namespace qat::quant
