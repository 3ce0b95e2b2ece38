#pragma once
// The CUDA twins of core's ops: <op>.cu beside <op>.cpp, with the op's
// signature. The op checks its arguments, then calls its twin when the input
// is on cuda; the twin shares the per-element rules of core/ops/math.h. CUDA
// builds only (QAT_WITH_CUDA). What a twin saves for backward and how its
// gradient is written (overwrite or accumulate) is what the op's header says.
#include "core/tensor.h"
#include "core/window.h"

namespace qat::cuda_twin {

Tensor relu(const Tensor& x);  // core/ops/relu.cu

// On cuBLAS and cuDNN (core/cuda_libraries.h).
Tensor matmul(const Tensor& a, const Tensor& b);                                      // core/ops/linear.cu
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);             // core/ops/linear.cu
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);  // core/ops/conv2d.cu
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, float momentum, float eps);  // core/ops/batch_norm.cu

}  // namespace qat::cuda_twin
