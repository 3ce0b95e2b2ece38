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
// and settles the ties as the integer kernel does: with a the mean rounded
// to nearest and d = (mean - a) / s in steps, a mean with |d| within
// 1 / (4 count) of 1/2 is a tie (any other mean of count integers is at
// least 1 / (2 count) away from one; the float mean's error is far below
// 1 / (4 count) for the windows qat pools: at most 7x7, 1e-4 of a step by
// the summation bound), and is moved a quarter step up before the
// quantizer rounds it, which then gives k + 1. The move is a constant:
// the gradient is the pool's through the quantizer's straight-through
// estimator, as before.
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
