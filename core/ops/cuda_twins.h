#pragma once
// The CUDA twins of core's ops: <op>.cu beside <op>.cpp, with the op's
// signature. The op checks its arguments, then calls its twin when the input
// is on cuda; the twin shares the per-element rules of core/ops/math.h. CUDA
// builds only (QAT_WITH_CUDA). What a twin saves for backward and how its
// gradient is written (overwrite or accumulate) is what the op's header says.
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops/math.h"
#include "core/tensor.h"
#include "core/window.h"

namespace qat::cuda_twin {

Tensor relu(const Tensor& x);       // core/ops/relu.cu
Tensor relu6(const Tensor& x);      // core/ops/relu.cu
Tensor hardswish(const Tensor& x);  // core/ops/relu.cu

// On cuBLAS and cuDNN (core/cuda_libraries.h).
Tensor matmul(const Tensor& a, const Tensor& b);                                      // core/ops/linear.cu
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);             // core/ops/linear.cu
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);  // core/ops/conv2d.cu
// Their backwards on their own (core/ops/linear.h, core/ops/conv2d.h).
TensorList linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const NeedGrad& need);
TensorList conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                           const NeedGrad& need);
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, float momentum, float eps);  // core/ops/batch_norm.cu

// core/ops/pool.cu
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p, bool count_include_pad);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

// core/ops/dropout.cu: training with p > 0 only (the op returns x otherwise);
// the CPU op's mask rule (Note [dropout mask]).
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);

// core/ops/loss.cu (targets already checked on the host by the op)
Tensor log_softmax(const Tensor& x);
Tensor nll_loss(const Tensor& logp, const Tensor& target);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, float label_smoothing);

Tensor scale_channels(const Tensor& x, const Tensor& s, int64_t axis);  // core/ops/scale_channels.cu

// core/ops/elementwise.cu: the forward values of the elementwise ops (their
// backwards compose ops that have twins), `shape` the broadcast shape.
Tensor binary_forward(const Tensor& a, const Tensor& b, const Shape& shape, op_math::BinaryOp op);
Tensor scalar_forward(const Tensor& a, op_math::BinaryOp op, float s);  // a (op) s
Tensor sum_to(const Tensor& g, const Shape& shape);

// core/ops/shape_ops.cu
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

}  // namespace qat::cuda_twin
