#pragma once
// Depthwise convolution on the CPU, computed directly (Note [depthwise
// kernel]): groups equal to the input channels, so each output channel reads
// one input channel (channel multiplier m = O / C output channels each).
// MobileNetV2's 3x3 depthwise layers are memory bound; im2col of one channel
// at a time and a GEMM of one row would copy each input nine times.
#include "core/ops/conv_plane.h"

namespace qat::conv_detail {

bool is_depthwise(const Geometry& g);

// out (N, O, OH, OW) = the convolution of x (N, C, H, W) with w (O, 1, KH, KW)
// plus bias b (O, or null).
void depthwise_forward(const float* x, const float* w, const float* b, const Geometry& g, const Conv2dParams& p,
                       float* out);

// dx (N, C, H, W) and dw (O, 1, KH, KW), each where non-null, both zeroed by
// the caller, from gy (N, O, OH, OW).
void depthwise_backward(const float* gy, const float* x, const float* w, const Geometry& g, const Conv2dParams& p,
                        float* dx, float* dw);

}  // namespace qat::conv_detail
