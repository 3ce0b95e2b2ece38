#pragma once
// 2-D convolution (cross-correlation, as PyTorch); CPU or cuda, all tensors
// on one device (twin on cuDNN: core/ops/conv2d.cu; below, the CPU's way).
// x: (N, C, H, W), weight: (O, C/groups, KH, KW), bias: (O) or undefined
// -> (N, O, OH, OW), OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1.
// Forward: im2col of the whole batch per group, then one sgemm
// (O/g, K) x (K, N*OH*OW); 1x1 stride-1 unpadded convs skip im2col.
// Backward (saves x and weight, recomputes the columns):
//   dW = dY' col^T, dcol = W^T dY', dx = col2im(dcol), db = sum dY.
#include "core/tensor.h"
#include "core/window.h"

namespace qat {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

}  // namespace qat
