#pragma once
// Matrix products on OpenBLAS sgemm; CPU or cuda, all tensors on one device
// (twins on cuBLAS: core/ops/linear.cu).
#include "core/tensor.h"

namespace qat {

// a: (M,K), b: (K,N) -> (M,N). Backward: da = g b^T, db = a^T g.
Tensor matmul(const Tensor& a, const Tensor& b);

// x: (N,in), weight: (out,in), bias: (out) or undefined -> (N,out) = x W^T + b.
// Backward (saves x and W): dx = g W, dW = g^T x, db = sum_n g.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace qat
