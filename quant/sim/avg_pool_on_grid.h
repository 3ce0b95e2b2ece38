#pragma once
// Note [a mean rounded onto its grid]
// Adaptive average pooling keeps its input's grid: the integer kernel
// (int_math.h, mean_half_up) rounds each window's mean of stored integers
// half up, floor(sum / count + 1/2). The fake-quant model's pool computes
// the mean in float and its SharedFakeQuantizer rounds it to nearest, half
// to even, so on a tie (sum / count = k + 1/2, about one mean in 16 for a
// 4x4 window) the float mean, a little above or below k + 1/2, went either
// way: 1 LSB on 2% of MobileNetV2's pooled values, which the classifier
// then spread into its logits.
//
// AvgPoolOnGrid runs the same two children (the pool, then the shared
// quantizer: freeze, compare-layers and INT8 training see them as before)
// and rounds as the integer kernel does. Its input is on the grid, so each
// window's mean in double is the exact mean of the integers to far below a
// step (each value's float error, at most 2^-24 of 255 steps). With a the
// float mean rounded to nearest and d = (exact mean - a) / s in steps, the
// integer rounding is k = floor(d + 1/2) steps from a: d = 1/2 on a tie, and
// any other mean of count integers lies at least 1 / (2 count) from a half
// step, so floor(d + 1/2 + 1 / (4 count)) gives k for windows of up to
// thousands of values. The mean is moved onto that grid point before the
// quantizer, which returns it exactly. The move is a constant: the gradient
// is the pool's through the quantizer's straight-through estimator, as
// before.
#include <memory>

#include "layers/layers.h"
#include "quant/sim/fake_quantizer.h"

namespace qat::quant {

class AvgPoolOnGrid : public Sequential {
 public:
  AvgPoolOnGrid(std::shared_ptr<Module> pool, std::shared_ptr<SharedFakeQuantizer> shared);
  Tensor forward(const Tensor& x) override;

 private:
  AdaptiveAvgPool2d* pool_;
  SharedFakeQuantizer* shared_;
};

}  // namespace qat::quant
