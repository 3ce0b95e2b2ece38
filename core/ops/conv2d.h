#pragma once
// 2-D convolution (cross-correlation, as PyTorch).
// x: (N, C, H, W), weight: (O, C/groups, KH, KW), bias: (O) or undefined
// -> (N, O, OH, OW), OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1.
// Forward: im2col of the whole batch per group, then one sgemm
// (O/g, K) x (K, N*OH*OW); 1x1 stride-1 unpadded convs skip im2col.
// Backward (saves x and weight, recomputes the columns):
//   dW = dY' col^T, dcol = W^T dY', dx = col2im(dcol), db = sum dY.
#include "core/tensor.h"

namespace qat {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

// Output spatial size for one dimension; errors if it would be < 1.
int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* op);

}  // namespace qat
