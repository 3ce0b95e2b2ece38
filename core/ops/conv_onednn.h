#pragma once
// Dense and grouped float convolutions on the CPU through oneDNN (Note
// [oneDNN convolutions] in conv_onednn.cpp): the library PyTorch's CPU
// convolutions run on, with kernels chosen for the CPU at run time (AVX-512,
// AVX2, ...). Internal to core/ops/conv2d.cpp; depthwise convolutions keep
// their own kernel (core/ops/depthwise_conv.h).
#include <string>

#include "core/ops/conv_plane.h"

namespace qat::conv_detail {

// "oneDNN 2.6.3 avx512_core_vnni": its version and the widest instructions
// its kernels use on this CPU (under QAT_MAX_CPU_ISA's ceiling).
std::string onednn_name();

// out (N, O, OH, OW) = the convolution of x (N, C, H, W) with w (O, C/groups,
// KH, KW) plus bias b (O, or null).
void onednn_forward(const float* x, const float* w, const float* b, const Geometry& g, const Conv2dParams& p,
                    float* out);

// dx (N, C, H, W) and dw (O, C/groups, KH, KW), each where non-null
// (overwritten), from gy (N, O, OH, OW). The bias gradient is the caller's.
void onednn_backward(const float* gy, const float* x, const float* w, const Geometry& g, const Conv2dParams& p,
                     float* dx, float* dw);

}  // namespace qat::conv_detail
