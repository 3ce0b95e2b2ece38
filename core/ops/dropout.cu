// The CUDA twin of dropout (core/ops/dropout.cpp): the mask of Note [dropout
// mask] (core/ops/dropout_math.h), computed per element from one key
// drawn from the Generator, in the forward and again in the backward.
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"
#include "core/ops/dropout_math.h"

namespace qat::cuda_twin {

namespace {

// y = x * mask (forward) or dx = g * mask (backward): one product each.
__global__ void dropout_kernel(const float* __restrict__ in, float* __restrict__ out, uint64_t key, float p,
                               float scale, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) out[i] = in[i] * op_math::dropout_mask_at(key, i, p, scale);
}

Tensor apply_mask(const Tensor& in, uint64_t key, float p, float scale) {
  const Tensor c = in.contiguous();
  Tensor out = Tensor::empty(in.sizes(), DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    dropout_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(c.device_data<float>(), out.device_data<float>(),
                                                                   key, p, scale, n);
    QAT_CUDA_CHECK_LAUNCH(dropout_kernel);
  }
  return out;
}

}  // namespace

// Called in training with p > 0 (the op returns x itself otherwise).
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  const uint64_t key = gen.next_u64();
  Tensor out = apply_mask(x, key, p, scale);
  return record(out, "dropout", {&x}, [key, p, scale](const Tensor& g, const NeedGrad&) {
    detail::check_gradient_device(g, Device::cuda, "dropout backward");
    return TensorList{apply_mask(g, key, p, scale)};
  });
}

}  // namespace qat::cuda_twin
