#pragma once
// Depthwise convolution's forward on the CPU, computed directly (Note
// [depthwise kernel]): groups equal to the input channels, so each output
// channel reads one input channel (channel multiplier m = O / C output
// channels each). Its backward is oneDNN's (core/ops/conv_onednn.h).
// MobileNetV2's 3x3 depthwise layers are memory bound.
#include "core/ops/conv_plane.h"

namespace qat::conv_detail {

bool is_depthwise(const Geometry& g);

// out (N, O, OH, OW) = the convolution of x (N, C, H, W) with w (O, 1, KH, KW)
// plus bias b (O, or null).
void depthwise_forward(const float* x, const float* w, const float* b, const Geometry& g, const Conv2dParams& p,
                       float* out);

// One output plane (OH x OW) = bias + the taps of w_oc (KH x KW) over a
// loaded plane, in (ki, kj) order: the forward's step, for INT8 training's
// depthwise forward on planes of integers (quant/int8_training/int8_cpu_depthwise.cpp).
void depthwise_forward_plane(PhasePlane& plane, const float* w_oc, float bias, const Geometry& g, float* out);

}  // namespace qat::conv_detail
