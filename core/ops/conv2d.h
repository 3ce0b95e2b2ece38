#pragma once
// 2-D convolution (cross-correlation, as PyTorch); CPU or cuda, all tensors
// on one device (twin on cuDNN: core/ops/conv2d.cu; below, the CPU's way).
// x: (N, C, H, W), weight: (O, C/groups, KH, KW), bias: (O) or undefined
// -> (N, O, OH, OW), OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1.
// Forward and backward through oneDNN's direct convolutions (Note [oneDNN
// convolutions], core/ops/conv_onednn.h), except the forward of depthwise
// convs (groups = C), computed directly plane by plane
// (core/ops/depthwise_conv.h). The backward saves x and weight; db = sum dY
// (in double).
#include <string>

#include "core/autograd.h"
#include "core/tensor.h"
#include "core/window.h"

namespace qat {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

// Which kernels the CPU's convolutions run ("oneDNN 2.6.3 avx512_core"):
// qat bench prints it.
std::string conv_kernels_name();

// conv2d's backward on its own, for ops that compute the forward another way
// (QAT layers' integer forward, quant/int8_training/int8_ops.h): (dx, dW, db) of gy
// where need says, from x and weight as conv2d would have saved them. The
// same arithmetic as conv2d's own backward, bit for bit.
TensorList conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                           const NeedGrad& need);

}  // namespace qat
