#pragma once
// Differentiable shape ops and reductions.
#include <vector>

#include "core/tensor.h"

namespace qat {

// reshape: same elements, new shape (one -1 allowed). Copies if x is not
// contiguous. Backward: reshape the gradient back.
Tensor reshape(const Tensor& x, const Shape& shape);
// flatten dims [start_dim, end) into one: (N,C,H,W) -> (N, C*H*W) for start_dim=1.
Tensor flatten(const Tensor& x, int64_t start_dim = 1);
// narrow (differentiable): a slice [start, start+length) of dim. Backward:
// the gradient placed into zeros of x's shape.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// concat (differentiable): the tensors joined along dim (every other size
// equal, one dtype and device; DenseNet's and Inception's channel joins at
// dim 1). Backward: each input's slice of the gradient.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim = 1);

// sum / mean of all elements -> scalar (shape []). Backward: g broadcast (/n).
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// sum over one dim (keepdim keeps it as size 1).
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace qat
