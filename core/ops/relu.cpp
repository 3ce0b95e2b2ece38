#include "core/ops/relu.h"

#include "core/ops/common.h"
#include "core/ops/math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

namespace {

// y = value(x) element by element on the CPU; the backward's dx =
// grad(s, g) from a saved tensor s: the output where the gradient can be
// read from it (which keeps x free), else the input. `backward_key`: the
// backward's profiler entry.
enum class SaveForBackward { output, input };
template <class Value, class Grad>
Tensor activation(const Tensor& x, const char* op, const char* backward_key, SaveForBackward save, Value value,
                  Grad grad) {
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = value(px[i]);
  const Tensor& kept = save == SaveForBackward::output ? out : xc;
  return record(out, op, {&x}, [sk = Saved(kept), op, backward_key, grad](const Tensor& g, const NeedGrad&) {
    QAT_PROFILE(backward_key);
    const Tensor& s = sk.get(op);
    Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(s.sizes());
    const float* ps = s.data<float>();
    const float* pg = gc.data<float>();
    float* pd = dx.data<float>();
    const int64_t n = dx.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) pd[i] = grad(ps[i], pg[i]);
    return TensorList{dx};
  });
}

}  // namespace

// The element functions as lambdas, not function pointers: a pointer
// argument is one type for every activation, and GCC then called relu6's
// through it, unvectorized (4x relu's time on MobileNetV2's activations).
Tensor hardswish(const Tensor& x) {
  QAT_PROFILE("hardswish.forward");
  detail::check_f32_any_device(x, "hardswish", "input");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::hardswish(x);  // core/ops/relu.cu
#endif
  // (the output does not tell x apart on [-3, 0]: the input is kept)
  return activation(
      x, "hardswish", "hardswish.backward", SaveForBackward::input,
      [](float v) { return op_math::hardswish_value(v); },
      [](float in, float g) { return op_math::hardswish_grad(in, g); });
}

Tensor relu(const Tensor& x) {
  QAT_PROFILE("relu.forward");
  detail::check_f32_any_device(x, "relu", "input");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::relu(x);  // core/ops/relu.cu
#endif
  // (out > 0 exactly where x > 0)
  return activation(
      x, "relu", "relu.backward", SaveForBackward::output, [](float v) { return op_math::relu_value(v); },
      [](float out, float g) { return op_math::relu_grad(out, g); });
}

Tensor relu6(const Tensor& x) {
  QAT_PROFILE("relu6.forward");
  detail::check_f32_any_device(x, "relu6", "input");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::relu6(x);  // core/ops/relu.cu
#endif
  // (0 < out < 6 exactly where 0 < x < 6)
  return activation(
      x, "relu6", "relu6.backward", SaveForBackward::output, [](float v) { return op_math::relu6_value(v); },
      [](float out, float g) { return op_math::relu6_grad(out, g); });
}

}  // namespace qat
