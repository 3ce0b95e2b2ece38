// The CUDA twins of the elementwise ops' forward values and of sum_to
// (core/ops/elementwise.cpp): the per-index bodies of core/ops/broadcast.h,
// one thread per output element. The ops' backwards are compositions of
// these (sum_to, mul, div, neg), so they run on the device through the same
// dispatch. sum_to adds each output's elements on one thread in the CPU's
// order (the same bits); that is one thread per output, which suits the
// broadcast shapes of a training step (bias-like outputs of many values each
// would want a CUB segmented reduction instead).
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/broadcast.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"

namespace qat::cuda_twin {

namespace {

__global__ void broadcast_binary_kernel(op_math::BinaryOp op, const float* __restrict__ a, StridedLayout la,
                                        const float* __restrict__ b, StridedLayout lb, float* __restrict__ out,
                                        int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) out[i] = op_math::broadcast_binary_at(i, op, a, la, b, lb);
}

__global__ void scalar_kernel(op_math::BinaryOp op, const float* __restrict__ a, float s, float* __restrict__ out,
                              int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) out[i] = op_math::binary_value(op, a[i], s);
}

__global__ void sum_to_kernel(const float* __restrict__ g, StridedLayout kept, StridedLayout summed, int64_t count,
                              float* __restrict__ out, int64_t n) {
  QAT_GRID_STRIDE_LOOP(k, n) out[k] = op_math::sum_to_at(k, g, kept, summed, count);
}

const char* op_name(op_math::BinaryOp op) {
  switch (op) {
    case op_math::BinaryOp::add: return "add";
    case op_math::BinaryOp::sub: return "sub";
    case op_math::BinaryOp::mul: return "mul";
    case op_math::BinaryOp::div: return "div";
  }
  return "binary op";
}

}  // namespace

Tensor binary_forward(const Tensor& a, const Tensor& b, const Shape& shape, op_math::BinaryOp op) {
  // Strided operands are read in place, through their own strides.
  const StridedLayout la = op_math::broadcast_layout(a, shape, op_name(op));
  const StridedLayout lb = op_math::broadcast_layout(b, shape, op_name(op));
  Tensor out = Tensor::empty(shape, DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    broadcast_binary_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        op, a.device_data<float>(), la, b.device_data<float>(), lb, out.device_data<float>(), n);
    QAT_CUDA_CHECK_LAUNCH(broadcast_binary_kernel);
  }
  return out;
}

Tensor scalar_forward(const Tensor& a, op_math::BinaryOp op, float s) {
  const Tensor c = a.contiguous();
  Tensor out = Tensor::empty(a.sizes(), DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    scalar_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(op, c.device_data<float>(), s,
                                                                  out.device_data<float>(), n);
    QAT_CUDA_CHECK_LAUNCH(scalar_kernel);
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  const op_math::SumToLayouts l = op_math::sum_to_layouts(g, shape);
  Tensor out = Tensor::empty(shape, DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    sum_to_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(g.device_data<float>(), l.kept, l.summed, l.count,
                                                                  out.device_data<float>(), n);
    QAT_CUDA_CHECK_LAUNCH(sum_to_kernel);
  }
  return out;
}

}  // namespace qat::cuda_twin
