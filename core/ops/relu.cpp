#include "core/ops/relu.h"

#include "core/ops/common.h"
#include "core/ops/math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

Tensor relu(const Tensor& x) {
  QAT_PROFILE("relu.forward");
  detail::check_f32_any_device(x, "relu", "input");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::relu(x);  // core/ops/relu.cu
#endif
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = op_math::relu_value(px[i]);
  // Saving the output is enough (out > 0 exactly where x > 0) and keeps x free.
  return record(out, "relu", {&x}, [so = Saved(out)](const Tensor& g, const NeedGrad&) {
    QAT_PROFILE("relu.backward");
    const Tensor& y = so.get("relu");
    Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(y.sizes());
    const float* py = y.data<float>();
    const float* pg = gc.data<float>();
    float* pd = dx.data<float>();
    const int64_t n = dx.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) pd[i] = op_math::relu_grad(py[i], pg[i]);
    return TensorList{dx};
  });
}

}  // namespace qat
