#pragma once
// LSQ and LSQ+ learned quantizers as autograd ops (docs/math/lsq.md).
//
// LSQ (Esser et al., ICLR 2020), integer range [-Q_N, Q_P] = [spec.qmin(), spec.qmax()]
// (4-bit signed [-8, 7], unsigned [0, 15]; narrow range [-7, 7]):
//   t = v / s,  v̄ = round(clamp(t, -Q_N, Q_P)),  v̂ = v̄ s          (round half to even)
// LSQ+ (Bhalgat et al., 2020) adds a learned offset β:
//   t = (v - β) / s,  v̂ = round(clamp(t, -Q_N, Q_P)) s + β
//
// Shapes: v any shape (f32). Per-tensor (!spec.per_channel): step and offset
// hold one value (shape (1) or []). Per-channel: shape (C), C = v.size(spec.axis).
// Output: v's shape, contiguous.
//
// Backward (gradients overwrite; the leaves' AccumulateGrad adds them up):
//   dv = g              inside, 0 when clipped
//   ds = grad_scale * Σ g * { -Q_N (clipped low) | Q_P (clipped high) | round(t) - t (inside) }
//   dβ = grad_scale * Σ g * { 1 (clipped) | 0 (inside) }
// the sums running over the elements that share a step (all of v, or one
// channel). Saves v, step and offset (no temporaries the size of v: the step
// and offset sums are reduced on the fly in the single backward pass).
//
// Which elements are "clipped" (the forward is the same either way):
//   LsqClip::paper   (default) Esser et al. eq. 3: t <= -Q_N or t >= Q_P, i.e.
//                    clamp before round, as in docs/math/lsq.md §3.
//   LsqClip::rounded round(t) < qmin or round(t) > qmax: PyTorch's
//                    _fake_quantize_learnable_per_{tensor,channel}_affine and the
//                    clipped STE of fake_quant. Differs from `paper` only for
//                    t in [-Q_N - 1/2, -Q_N] and [Q_P, Q_P + 1/2).
//
// Note [LSQ step positivity]
// The tensor passed as `step` is the raw learned parameter p, which the
// optimizer may drive to zero or below. The op uses
//   s = max(|p|, lsq_min_step(spec)),   lsq_min_step = max(spec.min_scale, 1e-8)
// and returns dL/dp = sign(p) * dL/ds (sign(0) = +1), passed straight through
// the floor so a parameter that sits at the floor can still move away. For
// p >= lsq_min_step (the normal regime) s == p bit for bit and dL/dp == dL/ds,
// i.e. the formulas of PyTorch's learnable fake quant (the forward and dv
// bit for bit; the step and offset sums in another order). No gradient has a 1/s factor,
// so a tiny step cannot blow the gradients up either. Use lsq_step_value()
// to read the effective step (freeze/export must use the same s).
#include <cstdint>

#include "core/tensor.h"
#include "quant/spec.h"

namespace qat::quant {

enum class LsqClip { paper, rounded };

// The smallest step the ops ever use: max(spec.min_scale, 1e-8).
constexpr float kLsqStepFloor = 1e-8f;
float lsq_min_step(const QuantSpec& spec);

Tensor lsq_quantize(const Tensor& v, const Tensor& step, const QuantSpec& spec, float grad_scale,
                    LsqClip clip = LsqClip::paper);
Tensor lsq_plus_quantize(const Tensor& v, const Tensor& step, const Tensor& offset, const QuantSpec& spec,
                         float grad_scale, LsqClip clip = LsqClip::paper);

// g = 1 / sqrt(N * Q_P), N = elements per step: weights in the layer (or in
// one output channel when per-channel), features per example for activations.
float lsq_grad_scale(int64_t numel_per_step, const QuantSpec& spec);

// The step the ops use for a raw parameter p: max(|p|, lsq_min_step(spec)),
// same shape, no autograd.
Tensor lsq_step_value(const Tensor& step_param, const QuantSpec& spec);

// LSQ init: s0 = 2 mean(|v|) / sqrt(Q_P), floored at lsq_min_step (an all-zero
// tensor gets the floor). lsq_init_step: over all of v. The per-channel
// variant: one value per index along spec.axis, shape (C).
// lsq_init_steps: (1) or (C) according to spec.per_channel.
float lsq_init_step(const Tensor& v, const QuantSpec& spec);
Tensor lsq_init_step_per_channel(const Tensor& v, const QuantSpec& spec);
Tensor lsq_init_steps(const Tensor& v, const QuantSpec& spec);

// LSQ+ init: a range [lo, hi] is mapped onto [qmin, qmax]:
//   s = (hi - lo) / (qmax - qmin),  β = lo - qmin * s   (so lo ↦ qmin, hi ↦ qmax)
// min_max:  [lo, hi] = [min(v), max(v)]
// mean_std: [lo, hi] = [μ - 3σ, μ + 3σ] ∩ [min(v), max(v)] (the paper's
//           statistics-based init; the intersection keeps a one-sided, e.g.
//           post-ReLU, distribution from wasting levels below its minimum).
// The range is widened to include 0 first (0 stays exactly representable up
// to rounding of β/s, as for the minmax observers), and s is floored at
// lsq_min_step. Shapes: (1) or (C) by spec.per_channel, like the ops expect.
enum class LsqPlusInit { min_max, mean_std };
struct LsqPlusParams {
  Tensor step;
  Tensor offset;
};
LsqPlusParams lsq_plus_init(const Tensor& v, const QuantSpec& spec, LsqPlusInit method = LsqPlusInit::mean_std);

}  // namespace qat::quant
