#pragma once
// The CUDA twins of INT8 training's ops (int8_ops.cu beside int8_ops.cpp),
// called by the op after its checks when its input is on cuda. CUDA builds
// only (QAT_WITH_CUDA).
#include <memory>
#include <string>

#include "core/tensor.h"
#include "quant/int8_training/int8_math.h"
#include "quant/int8_training/int8_ops.h"

namespace qat::quant::cuda_twin {

// quant/int8_training/int8_ops.cu: INT8 training's integer layer (int8_device.h) after
// the op's checks; x, wq and bias on cuda, w_scale on either device.
Tensor int8_layer(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                  const int8_math::Geometry& g, const std::shared_ptr<Int8GradState>& state);
// ... and the values of its forward alone (QAT layers' integer forward, no
// autograd history); who: the layer as the errors name it.
Tensor int_forward_values(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                          const Tensor& bias, const int8_math::Geometry& g, const std::string& who);

}  // namespace qat::quant::cuda_twin
