#pragma once
// Per-element rules of the training-time quantization ops, shared by the CPU
// kernels (fake_quant.cpp, lsq.cpp) and their CUDA twins, so that the CPU
// tests cover the arithmetic both run. Pure functions of floats; no state.
#include <cmath>

#include "core/host_device.h"
#include "quant/integer/int_math.h"
#include "quant/observe/channel_geometry.h"

namespace qat::quant::math {

// Round half to even, as std::nearbyint under the default rounding mode
// (one definition for every quantization kernel: quant/integer/int_math.h).
using int_math::round_half_even;

// `q < lo ? lo : (q > hi ? hi : q)`: NaN stays NaN.
QAT_HOST_DEVICE inline float clamp_grid(float q, float lo, float hi) { return q < lo ? lo : (q > hi ? hi : q); }

// Note [fake-quant arithmetic]: PyTorch computes
//   qval = static_cast<int64_t>(z + std::nearbyint(x * inv_scale))   (int64 + float -> float)
//   y    = (fmin(fmax(qval, qmin), qmax) - z) * scale                (in double, stored as float)
//   mask = qmin <= qval && qval <= qmax
// Here everything stays in float: nearbyint(x * inv) + z is the same float
// sum; clamping a float holding an integer equals clamping its int64; (c - z)
// is an exact small integer, and its product with the float scale is exact in
// double, so rounding it once to float equals the float32 product.

// The grid value before the clamp: nearbyint(x * inv) + z (inv = 1.0f / s).
QAT_HOST_DEVICE inline float fake_quant_grid(float x, float inv, float z) { return round_half_even(x * inv) + z; }

// The fake-quantized value of a grid value q (before the clamp).
QAT_HOST_DEVICE inline float fake_quant_dequant(float q, float s, float z, float qmin, float qmax) {
  return (clamp_grid(q, qmin, qmax) - z) * s;
}

// Clipped STE: the gradient passes where the unclamped grid value is in range.
QAT_HOST_DEVICE inline bool ste_passes(float q, float qmin, float qmax) { return (q >= qmin) & (q <= qmax); }

// The clipped STE's gradient from the saved mask byte (1: passes): a product,
// as PyTorch's dY * mask, so NaN or inf in dy stays NaN where the mask is 0.
QAT_HOST_DEVICE inline float ste_grad(float dy, unsigned char mask) { return dy * static_cast<float>(mask); }

// LSQ / LSQ+ forward of one element (lsq.h): t = (v - beta) / s,
// round(clamp(t, lo, hi)) s (+ beta).
template <bool kPlus>
QAT_HOST_DEVICE inline float lsq_value(float v, float s, float inv, float beta, float lo, float hi) {
  const float t = (kPlus ? v - beta : v) * inv;
  const float q = round_half_even(clamp_grid(t, lo, hi));
  return kPlus ? q * s + beta : q * s;
}

// One element's LSQ / LSQ+ gradient terms (lsq.h): dv, its step term and its
// offset term (before the sums and the gradient scale). kPaperClip: clipped
// where t <= lo or t >= hi (Esser et al.); else where round(t) leaves [lo, hi]
// (PyTorch's learnable fake quant).
struct LsqGrad {
  float dv, ds, db;
};
template <bool kPlus, bool kPaperClip>
QAT_HOST_DEVICE inline LsqGrad lsq_grad(float v, float g, float inv, float beta, float lo, float hi) {
  const float t = (kPlus ? v - beta : v) * inv;
  const float r = round_half_even(t);
  const bool below = kPaperClip ? t <= lo : r < lo;
  const bool above = kPaperClip ? t >= hi : r > hi;
  const bool clipped = below || above;
  // Selects, never mask products: t may be ±inf far out of range.
  return {clipped ? 0.f : g, (below ? lo : above ? hi : r - t) * g, clipped ? g : 0.f};
}

// LSQ's backward as the slots split of the CUDA twin (channel_geometry.h):
// slot s of channel c writes dv (when dv is not null) for its elements and
// sums their step and offset terms in double. inv_beta: per channel, 1/s
// then beta (2C floats).
template <bool kPlus, bool kPaperClip>
QAT_HOST_DEVICE inline void lsq_slot_backward(const float* v, const float* g, float* dv, const ChannelGeometry& geo,
                                              const float* inv_beta, int64_t c, int64_t slot, int64_t slots,
                                              float lo, float hi, double& ds, double& db) {
  const float inv = inv_beta[c], beta = inv_beta[geo.channels + c];
  ds = 0.0;
  db = 0.0;
  const int64_t n = geo.per_channel();
  for (int64_t k = slot; k < n; k += slots) {
    const int64_t i = geo.offset(c, k);
    const LsqGrad e = lsq_grad<kPlus, kPaperClip>(v[i], g[i], inv, beta, lo, hi);
    if (dv != nullptr) dv[i] = e.dv;
    ds += e.ds;
    db += e.db;
  }
}

// Channel c's sum of its `slots` partials (laid out [channel][slot]).
QAT_HOST_DEVICE inline double channel_sum(const double* partial, int64_t c, int64_t slots) {
  double sum = 0.0;
  for (int64_t s = 0; s < slots; ++s) sum += partial[c * slots + s];
  return sum;
}

}  // namespace qat::quant::math
