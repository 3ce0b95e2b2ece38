#pragma once
// Matrix products on OpenBLAS sgemm; CPU or cuda, all tensors on one device
// (twins on cuBLAS: core/ops/linear.cu).
#include "core/autograd.h"
#include "core/tensor.h"

namespace qat {

// a: (M,K), b: (K,N) -> (M,N). Backward: da = g b^T, db = a^T g.
Tensor matmul(const Tensor& a, const Tensor& b);

// x: (N,in), weight: (out,in), bias: (out) or undefined -> (N,out) = x W^T + b.
// Backward (saves x and W): dx = g W, dW = g^T x, db = sum_n g.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// linear's backward on its own, for ops that compute the forward another way
// (QAT layers' integer forward, quant/int8_training/int8_ops.h): (dx, dW, db) of g
// (N,out) where need says, from x (N,in) (for dW) and weight (out,in) (for
// dx); either may be undefined where its gradient is not needed. The same
// arithmetic as linear's own backward, bit for bit.
TensorList linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const NeedGrad& need);

}  // namespace qat
