#include "core/ops/dropout.h"

#include "core/ops/common.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  QAT_PROFILE("dropout");
  detail::check_f32_any_device(x, "dropout", "input");
  QAT_CHECK(p >= 0.f && p <= 1.f, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.f) return x;
#if QAT_WITH_CUDA
  // Its own mask rule, from one draw of gen (Note [device dropout mask]).
  if (x.device() == Device::cuda) return cuda_twin::dropout(x, p, training, gen);  // core/ops/dropout.cu
#endif
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  Tensor xc = x.contiguous();
  const int64_t n = xc.numel();
  // Mask as the scale itself (0 or 1/(1-p)), so forward and backward are one multiply.
  Tensor mask = Tensor::empty(x.sizes());
  float* pm = mask.data<float>();
  for (int64_t i = 0; i < n; ++i) pm[i] = gen.bernoulli(p) ? 0.f : scale;
  Tensor out = Tensor::empty(x.sizes());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = px[i] * pm[i];
  return record(out, "dropout", {&x}, [sm = Saved(mask)](const Tensor& g, const NeedGrad&) {
    const Tensor& m = sm.get("dropout");
    Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(m.sizes());
    const float* pg = gc.data<float>();
    const float* pm = m.data<float>();
    float* pd = dx.data<float>();
    const int64_t n = dx.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) pd[i] = pg[i] * pm[i];
    return TensorList{dx};
  });
}

}  // namespace qat
