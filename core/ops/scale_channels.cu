// The CUDA twin of scale_channels (core/ops/scale_channels.cpp): products per
// element, and the scale's gradient one thread per channel running the CPU's
// per-channel sum (op_math::scale_channel_grad: the same lanes and order, so
// the same bits). One thread per channel suits the op's use, folding BN into
// weights (C = output channels, a few thousand values each).
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"
#include "core/ops/scale_channels_math.h"

namespace qat::cuda_twin {

namespace {

// out[i] = in[i] * s[channel of i] (forward: y = x s; backward: dx = g s).
__global__ void scale_by_channel_kernel(const float* __restrict__ in, const float* __restrict__ s,
                                        float* __restrict__ out, int64_t channels, int64_t inner, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) out[i] = in[i] * s[op_math::channel_of(i, channels, inner)];
}

__global__ void scale_grad_kernel(const float* __restrict__ g, const float* __restrict__ x, float* __restrict__ ds,
                                  int64_t outer, int64_t channels, int64_t inner) {
  QAT_GRID_STRIDE_LOOP(c, channels) ds[c] = op_math::scale_channel_grad(c, g, x, outer, channels, inner);
}

Tensor scale_by_channel(const Tensor& in, const Tensor& s, const detail::ChannelSpan& sp) {
  Tensor out = Tensor::empty(in.sizes(), DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    scale_by_channel_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        in.device_data<float>(), s.device_data<float>(), out.device_data<float>(), sp.channels, sp.inner, n);
    QAT_CUDA_CHECK_LAUNCH(scale_by_channel_kernel);
  }
  return out;
}

}  // namespace

Tensor scale_channels(const Tensor& x, const Tensor& s, int64_t axis) {
  const Tensor xc = x.contiguous(), sc = s.contiguous();
  const detail::ChannelSpan sp = detail::channel_span(xc, axis);
  Tensor out = scale_by_channel(xc, sc, sp);
  const bool need_s = any_requires_grad({&s});
  return record(out, "scale_channels", {&x, &s},
                [sx = Saved(need_s ? xc : Tensor()), ss = Saved(sc), sp](const Tensor& g, const NeedGrad& need) {
                  const Tensor& s = ss.get("scale_channels");
                  detail::check_same_device("scale_channels backward", {{"scale", &s}, {"gradient", &g}});
                  const Tensor gc = g.contiguous();
                  TensorList r(2);
                  if (need[0]) r[0] = scale_by_channel(gc, s, sp);
                  if (need[1]) {
                    const Tensor& x = sx.get("scale_channels");
                    r[1] = Tensor::empty({sp.channels}, DType::f32, Device::cuda);
                    if (sp.channels > 0) {
                      scale_grad_kernel<<<cuda::blocks_for(sp.channels), cuda::kThreadsPerBlock>>>(
                          gc.device_data<float>(), x.device_data<float>(), r[1].device_data<float>(), sp.outer,
                          sp.channels, sp.inner);
                      QAT_CUDA_CHECK_LAUNCH(scale_grad_kernel);
                    }
                  }
                  return r;
                });
}

}  // namespace qat::cuda_twin
