#include "quant/qparams.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace qat::quant {

namespace {

// Smallest power of two >= f (f > 0, normal).
float pow2_ceil(float f) {
  int e = 0;
  const float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? f : std::ldexp(1.f, e);
}

}  // namespace

float scale_floor(const QuantSpec& spec) { return std::max(spec.min_scale, FLT_EPSILON); }

void qparams_from_range(const QuantSpec& spec, float min_val, float max_val, float& scale, int32_t& zero_point) {
  const float inf = std::numeric_limits<float>::infinity();
  if (min_val == inf && max_val == -inf) {  // nothing observed yet (PyTorch: default qparams)
    scale = 1.f;
    zero_point = 0;
    return;
  }
  QAT_CHECK(std::isfinite(min_val) && std::isfinite(max_val), "compute_qparams: observed range [", min_val, ", ",
            max_val, "] is not finite (the observed tensor held inf)");
  QAT_CHECK(min_val <= max_val, "compute_qparams: min ", min_val, " > max ", max_val);
  const int32_t qmin = spec.qmin(), qmax = spec.qmax();
  const float lo = std::min(min_val, 0.f);
  const float hi = std::max(max_val, 0.f);
  const float floor_s = scale_floor(spec);

  if (spec.formula == ScaleFormula::power_of_two) {
    const int mag = spec.is_signed ? spec.bits - 1 : spec.bits;
    const float absmax = spec.is_signed ? std::max(-lo, hi) : hi;
    float s = 0.f;
    if (absmax > 0.f) {
      int e = 0;
      std::frexp(absmax, &e);          // absmax = m 2^e, m in [0.5, 1): floor(log2(absmax)) = e - 1
      s = std::ldexp(1.f, e - mag);    // 2^(floor(log2(absmax)) + 1 - mag)
    }
    scale = std::max(s, pow2_ceil(floor_s));
    zero_point = 0;
    return;
  }

  if (spec.formula == ScaleFormula::amax_over_qmax) {  // TensorRT: amax / 127 at int8, a float32 division
    scale = std::max(std::max(-lo, hi) / static_cast<float>(qmax), floor_s);
    zero_point = 0;
    return;
  }
  if (spec.symmetric) {
    // PyTorch: max_val_pos / (float(quant_max - quant_min) / 2), a float32 division.
    const float half_range = static_cast<float>(static_cast<double>(qmax - qmin) / 2.0);
    float s = std::max(-lo, hi) / half_range;
    scale = std::max(s, floor_s);
    zero_point = spec.is_signed ? 0 : (qmax + 1) / 2;
    return;
  }

  float s = (hi - lo) / static_cast<float>(qmax - qmin);
  s = std::max(s, floor_s);
  // zero_point = quant_min - round(min_val_neg / scale), clamped (round: half to even).
  const float r = std::nearbyint(lo / s);  // <= 0
  const float zf = static_cast<float>(qmin) - std::max(r, -static_cast<float>(1 << 24));
  scale = s;
  zero_point = static_cast<int32_t>(std::min(std::max(zf, static_cast<float>(qmin)), static_cast<float>(qmax)));
}

QParams compute_qparams(const QuantSpec& spec, const Tensor& min_vals, const Tensor& max_vals) {
  QAT_CHECK(min_vals.defined() && max_vals.defined(), "compute_qparams: min/max undefined");
  QAT_CHECK(min_vals.dtype() == DType::f32 && max_vals.dtype() == DType::f32,
            "compute_qparams: expected float32 min/max, got ", dtype_name(min_vals.dtype()), " and ",
            dtype_name(max_vals.dtype()));
  QAT_CHECK(min_vals.sizes() == max_vals.sizes(), "compute_qparams: min shape ", min_vals.sizes(),
            " != max shape ", max_vals.sizes());
  QAT_CHECK(min_vals.numel() >= 1, "compute_qparams: empty min/max");
  const Tensor mn = min_vals.contiguous(), mx = max_vals.contiguous();
  Shape shape = min_vals.dim() == 0 ? Shape{1} : min_vals.sizes();
  QParams q{Tensor::empty(shape, DType::f32), Tensor::empty(shape, DType::i32)};
  const float* pmn = mn.data<float>();
  const float* pmx = mx.data<float>();
  float* ps = q.scale.data<float>();
  int32_t* pz = q.zero_point.data<int32_t>();
  for (int64_t c = 0; c < mn.numel(); ++c) qparams_from_range(spec, pmn[c], pmx[c], ps[c], pz[c]);
  return q;
}

}  // namespace qat::quant
