#pragma once
// Pooling over (N, C, H, W) planes.
#include "core/tensor.h"
#include "core/window.h"

namespace qat {

// x: (N,C,H,W) -> (N,C,OH,OW); padding is -inf (PyTorch: pad <= kernel/2).
// Saves the argmax index of every output (int32, within the HxW plane);
// backward scatters g to those positions (+=, overlapping windows add).
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);

// Average over each window; count_include_pad as PyTorch's default (true).
// Backward spreads g / count evenly over the window.
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p, bool count_include_pad = true);

// x: (N,C,H,W) -> (N,C,OH,OW); window for output i is
// [floor(i*H/OH), ceil((i+1)*H/OH)) as PyTorch (works for OH > H too).
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

}  // namespace qat
