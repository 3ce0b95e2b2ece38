// The CUDA twins of relu, relu6 and hardswish (core/ops/relu.cpp): the same
// ops on a cuda tensor, the per-element rules of core/ops/math.h, the same
// tensor saved for the backward (the output, or hardswish's input).
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"
#include "core/ops/math.h"

namespace qat::cuda_twin {

namespace {

struct ReluRule {
  static constexpr bool kSavesOutput = true;
  __device__ float value(float x) const { return op_math::relu_value(x); }
  __device__ float grad(float y, float g) const { return op_math::relu_grad(y, g); }
};
struct Relu6Rule {
  static constexpr bool kSavesOutput = true;
  __device__ float value(float x) const { return op_math::relu6_value(x); }
  __device__ float grad(float y, float g) const { return op_math::relu6_grad(y, g); }
};
struct HardswishRule {
  static constexpr bool kSavesOutput = false;  // the output does not tell x apart on [-3, 0]
  __device__ float value(float x) const { return op_math::hardswish_value(x); }
  __device__ float grad(float x, float g) const { return op_math::hardswish_grad(x, g); }
};

template <class Rule>
__global__ void activation_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) y[i] = Rule().value(x[i]);
}

template <class Rule>
__global__ void activation_backward_kernel(const float* __restrict__ saved, const float* __restrict__ g,
                                           float* __restrict__ dx, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) dx[i] = Rule().grad(saved[i], g[i]);
}

template <class Rule>
Tensor activation(const Tensor& x, const char* op) {
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes(), DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    activation_forward_kernel<Rule><<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(xc.device_data<float>(),
                                                                                     out.device_data<float>(), n);
    QAT_CUDA_CHECK_LAUNCH(activation_forward_kernel);
  }
  const Tensor& kept = Rule::kSavesOutput ? out : xc;
  return record(out, op, {&x}, [sk = Saved(kept), op](const Tensor& g, const NeedGrad&) {
    const Tensor& s = sk.get(op);
    detail::check_same_device(op, {{"saved tensor", &s}, {"gradient", &g}});
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(s.sizes(), DType::f32, Device::cuda);
    const int64_t m = dx.numel();
    if (m > 0) {
      activation_backward_kernel<Rule><<<cuda::blocks_for(m), cuda::kThreadsPerBlock>>>(
          s.device_data<float>(), gc.device_data<float>(), dx.device_data<float>(), m);
      QAT_CUDA_CHECK_LAUNCH(activation_backward_kernel);
    }
    return TensorList{dx};
  });
}

}  // namespace

Tensor relu(const Tensor& x) { return activation<ReluRule>(x, "relu"); }
Tensor relu6(const Tensor& x) { return activation<Relu6Rule>(x, "relu6"); }
Tensor hardswish(const Tensor& x) { return activation<HardswishRule>(x, "hardswish"); }

}  // namespace qat::cuda_twin
