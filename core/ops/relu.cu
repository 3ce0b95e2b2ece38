// The CUDA twin of relu (core/ops/relu.cpp): the same op on a cuda tensor,
// the per-element rules of core/ops/math.h.
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"
#include "core/ops/math.h"

namespace qat::cuda_twin {

namespace {

__global__ void relu_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) y[i] = op_math::relu_value(x[i]);
}

__global__ void relu_backward_kernel(const float* __restrict__ y, const float* __restrict__ g,
                                     float* __restrict__ dx, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) dx[i] = op_math::relu_grad(y[i], g[i]);
}

}  // namespace

Tensor relu(const Tensor& x) {
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes(), DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    relu_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(xc.device_data<float>(),
                                                                          out.device_data<float>(), n);
    QAT_CUDA_CHECK_LAUNCH(relu_forward_kernel);
  }
  return record(out, "relu", {&x}, [so = Saved(out)](const Tensor& g, const NeedGrad&) {
    const Tensor& y = so.get("relu");
    detail::check_same_device("relu backward", {{"output", &y}, {"gradient", &g}});
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(y.sizes(), DType::f32, Device::cuda);
    const int64_t m = dx.numel();
    if (m > 0) {
      relu_backward_kernel<<<cuda::blocks_for(m), cuda::kThreadsPerBlock>>>(
          y.device_data<float>(), gc.device_data<float>(), dx.device_data<float>(), m);
      QAT_CUDA_CHECK_LAUNCH(relu_backward_kernel);
    }
    return TensorList{dx};
  });
}

}  // namespace qat::cuda_twin
