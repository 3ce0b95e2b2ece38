#include "core/ops/scale_channels.h"

#include "core/ops/common.h"
#include "core/ops/scale_channels_math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

Tensor scale_channels(const Tensor& x, const Tensor& s, int64_t axis) {
  QAT_PROFILE("scale_channels.forward");
  detail::check_f32_any_device(x, "scale_channels", "input");
  detail::check_f32_any_device(s, "scale_channels", "scale");
  detail::check_same_device("scale_channels", {{"input", &x}, {"scale", &s}});
  QAT_CHECK(axis >= 0 && axis < x.dim(), "scale_channels: axis ", axis, " out of range for input ", x.sizes());
  QAT_CHECK(s.dim() == 1 && s.size(0) == x.size(axis), "scale_channels: expected scale (", x.size(axis),
            ") for input ", x.sizes(), " along axis ", axis, ", got ", s.sizes());
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::scale_channels(x, s, axis);  // core/ops/scale_channels.cu
#endif
  const Tensor xc = x.contiguous(), sc = s.contiguous();
  const detail::ChannelSpan sp = detail::channel_span(xc, axis);
  Tensor out = Tensor::empty(x.sizes());
  const float* px = xc.data<float>();
  const float* ps = sc.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for collapse(2) if (xc.numel() > detail::kParallelGrain) schedule(static)
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t c = 0; c < sp.channels; ++c) {
      const int64_t base = (o * sp.channels + c) * sp.inner;
      for (int64_t i = 0; i < sp.inner; ++i) po[base + i] = px[base + i] * ps[c];
    }
  const bool need_s = any_requires_grad({&s});
  return record(out, "scale_channels", {&x, &s},
                [sx = Saved(need_s ? xc : Tensor()), ss = Saved(sc), sp](const Tensor& g, const NeedGrad& need) {
                  QAT_PROFILE("scale_channels.backward");
                  const Tensor gc = g.contiguous();
                  const float* pg = gc.data<float>();
                  const float* ps = ss.get("scale_channels").data<float>();
                  TensorList r(2);
                  if (need[0]) {
                    r[0] = Tensor::empty(gc.sizes());
                    float* pd = r[0].data<float>();
#pragma omp parallel for collapse(2) if (gc.numel() > detail::kParallelGrain) schedule(static)
                    for (int64_t o = 0; o < sp.outer; ++o)
                      for (int64_t c = 0; c < sp.channels; ++c) {
                        const int64_t base = (o * sp.channels + c) * sp.inner;
                        for (int64_t i = 0; i < sp.inner; ++i) pd[base + i] = pg[base + i] * ps[c];
                      }
                  }
                  if (need[1]) {
                    const float* px = sx.get("scale_channels").data<float>();
                    r[1] = Tensor::empty({sp.channels});
                    float* pds = r[1].data<float>();
#pragma omp parallel for if (gc.numel() > detail::kParallelGrain) schedule(static)
                    for (int64_t c = 0; c < sp.channels; ++c)
                      pds[c] = op_math::scale_channel_grad(c, pg, px, sp.outer, sp.channels, sp.inner);
                  }
                  return r;
                });
}

}  // namespace qat
