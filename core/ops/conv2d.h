#pragma once
// 2-D convolution (cross-correlation, as PyTorch); CPU or cuda, all tensors
// on one device (twin on cuDNN: core/ops/conv2d.cu; below, the CPU's way).
// x: (N, C, H, W), weight: (O, C/groups, KH, KW), bias: (O) or undefined
// -> (N, O, OH, OW), OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1.
// Forward: im2col of the whole batch per group, then one sgemm
// (O/g, K) x (K, N*OH*OW); 1x1 stride-1 unpadded convs skip im2col;
// depthwise convs (groups = C) are computed directly, plane by plane
// (core/ops/depthwise_conv.h).
// Backward (saves x and weight, recomputes the columns):
//   dW = dY' col^T, dcol = W^T dY', dx = col2im(dcol), db = sum dY.
#include "core/autograd.h"
#include "core/tensor.h"
#include "core/window.h"

namespace qat {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

// conv2d's backward on its own, for ops that compute the forward another way
// (QAT layers' integer forward, quant/int8_training/int8_ops.h): (dx, dW, db) of gy
// where need says, from x and weight as conv2d would have saved them. The
// same arithmetic as conv2d's own backward, bit for bit.
TensorList conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                           const NeedGrad& need);

}  // namespace qat
