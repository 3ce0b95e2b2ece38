#pragma once
// INT8 training's integer layer written once (Note [INT8 training over
// executors]), for the CPU (int8_cpu.h: CpuStages, the tuned kernels) and
// for any executor (int8_device.h: DeviceStages, per-index bodies and the
// executor's GEMM: the CUDA twin, and the tests' host executor).
//
// Note [INT8 training over executors]: what a layer does, in which order, and
// what its gradient quantizers' state sees is this file's, whatever runs it:
// the forward (the weight's integers, the input's, the padding integer, the
// GEMM and its dequantization) and the backward (the bias gradient; for each
// gradient quantizer its clip, tracked or searched, its integers and their
// cosine sums, the GEMM, what the state records and keeps). How a step runs
// is the stages': a Stages type S provides
//   S::Saved       what the backward keeps; at least g, grid and pad
//   S::Codes       one gradient's integers, with their cosine sums (stats)
//   S::device      where its tensors live
//   input_integers(Saved&, x, who)            the input's integers (off the grid: an error naming who)
//   forward_gemm(Saved&, bias) -> Y           (N, O, OH, OW); may keep what the backward reads
//   max_abs(sv, dy, which, nan_wins)          max |dY| (which 0) or |dY s_w[o]| (which 1)
//   refresh_clip(sv, dy, which, state)        the clip search on those values
//   quantize(sv, dy, which, quantizer) -> Codes
//   weight_grad(sv, codes, scale) -> (O, K);  input_grad(sv, codes, scale) -> (N, C, H, W)
//   bias_grad(sv, dy) -> (O);                 host_codes(codes) -> the integers on the host
// and the weight's integers in Saved before forward() runs. Both stage sets
// compute the same integers and floats bit for bit (the per-element rules
// are int8_math.h's; the [math] tests run DeviceStages on the host against
// CpuStages).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/common.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "quant/int8_training/int8_math.h"
#include "quant/int8_training/int8_ops.h"

namespace qat::quant::int8_steps {

using int8_math::Geometry;

// The real zero as the padding integer: convolutions pad with 0.0, which is
// on the grid only when the zero point is an integer.
inline uint8_t pad_integer(const ActGrid& grid, const Geometry& g, const std::string& who) {
  const double z = std::nearbyint(grid.zero);
  const bool padded = g.pad_h > 0 || g.pad_w > 0;
  QAT_CHECK(!padded || (z == grid.zero && z >= 0 && z < grid.levels), who,
            " pads its input, whose grid has the fractional zero point ", grid.zero,
            " (LSQ+): 0.0 is not on it; use quant.method lsq or an observer, or keep the layer float "
            "(quant.int8_training.keep_float)");
  return static_cast<uint8_t>(std::clamp(z, 0.0, 255.0));
}

// Y of the layer; sv holds g, grid and the weight's integers, and gets the
// input's integers and the padding integer.
template <class S>
Tensor forward(S& s, typename S::Saved& sv, const Tensor& x, const Tensor& bias, const std::string& who) {
  s.input_integers(sv, x, who);
  sv.pad = pad_integer(sv.grid, sv.g, who);
  return s.forward_gemm(sv, bias.defined() ? bias.contiguous() : Tensor());
}

// Quantizer `which`'s clip for this step (Int8GradState): tracked from max |v|
// between searches; when one is due, max |v| under max clipping, else the
// search. Tracking the input gradient's reports its first non-finite value
// (nan_wins false), everything else any NaN.
template <class S>
void update_clip(S& s, const typename S::Saved& sv, const Tensor& dy, Int8GradState& st, int which) {
  QAT_PROFILE("int8_train.clip");
  if (!st.clip_due(which)) return st.track_clip(which, s.max_abs(sv, dy, which, which == 0));
  if (st.config().clipping == GradClipping::max) return st.refresh_max_clip(which, s.max_abs(sv, dy, which, true));
  s.refresh_clip(sv, dy, which, st);
}

// The gradient of quantizer `which`: 0 the weight's (O, K), through G; 1 the
// input's (N, C, H, W), through Gx.
template <class S>
Tensor gradient(S& s, const typename S::Saved& sv, const Tensor& dy, Int8GradState& st, int which) {
  const Geometry& g = sv.g;
  update_clip(s, sv, dy, st, which);
  const float scale = st.grad_scale(which);
  GradQuantStats stats;
  Tensor out;
  std::vector<int8_t> codes;
  if (scale > 0.f) {
    const int8_math::GradQuantizer q{1.f / scale, grad_qmax(st.config().bits), st.config().rounding,
                                     mix64(st.noise_key(which))};
    const typename S::Codes c = s.quantize(sv, dy, which, q);
    stats = c.stats;
    out = which == 0 ? s.weight_grad(sv, c, scale) : s.input_grad(sv, c, scale);
    if (st.keep_last) codes = s.host_codes(c);
  } else {
    out = which == 0 ? Tensor::zeros({g.o, g.K()}, DType::f32, S::device)
                     : Tensor::zeros({g.n, g.c, g.h, g.w}, DType::f32, S::device);
    if (st.keep_last) codes.assign(static_cast<size_t>(g.M() * g.o), 0);
  }
  st.record(which, stats);
  if (st.keep_last) {
    if (which == 0) {
      st.last_g = std::move(codes), st.last_scale_g = scale;
      st.last_dy = dy.to(Device::cpu).contiguous().to_vector();
    } else {
      st.last_gx = std::move(codes), st.last_scale_gx = scale;
    }
  }
  return out;
}

// dx, dwq and dbias of one layer (in the shapes of x, the weight and the bias).
template <class S>
TensorList backward(S& s, const typename S::Saved& sv, const Tensor& gy, Int8GradState& st, const NeedGrad& need,
                    const Shape& x_shape, const Shape& w_shape) {
  QAT_PROFILE("int8_train.backward");
  detail::check_gradient_device(gy, S::device, "int8_layer backward");
  const Tensor dy = gy.contiguous();
  TensorList r(3);
  if (need[2]) r[2] = s.bias_grad(sv, dy);
  if (need[1]) r[1] = gradient(s, sv, dy, st, 0).view(w_shape);
  if (need[0]) r[0] = gradient(s, sv, dy, st, 1).view(x_shape);
  st.finish_step(need[1], need[0]);
  return r;
}

// INT8 training's layer: the integer forward, and the integer backward into
// x, w (the autograd input the weight gradient goes to) and bias.
template <class S>
Tensor layer(S s, typename S::Saved sv, const Tensor& x, const Tensor& w, const Tensor& bias,
             const std::shared_ptr<Int8GradState>& state) {
  Tensor y = forward(s, sv, x, bias, int8_training_who(state->layer()));
  return record(y, "int8_layer", {&x, &w, &bias},
                [s, sv = std::move(sv), state, xs = x.sizes(), ws = w.sizes()](const Tensor& gy,
                                                                                 const NeedGrad& need) mutable {
                  return backward(s, sv, gy, *state, need, xs, ws);
                });
}

}  // namespace qat::quant::int8_steps
