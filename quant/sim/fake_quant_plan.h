#pragma once
// fake_quantize's arguments checked and read into host constants: shared by
// the CPU op (fake_quant.cpp) and its CUDA twin (fake_quant.cu), so that both
// refuse the same arguments with the same messages and quantize with the same
// constants. Internal to quant/sim.
#include <vector>

#include "core/tensor.h"
#include "quant/observe/channel_layout.h"
#include "quant/spec.h"

namespace qat::quant {

struct FakeQuantPlan {
  ChannelLayout layout;        // Note [channel layout]
  std::vector<float> s, inv, z;  // per channel: scale, 1.0f / scale (float, as PyTorch), zero point
  float qmin = 0.f, qmax = 0.f;
};

// Checks what fake_quant.h states (dtypes, shapes, scale and zero_point on
// x's device or on the CPU, scale > 0 and finite, qmin <= zero_point <= qmax) and reads the
// qparams (copied to the host when they are on the device).
FakeQuantPlan plan_fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                 const QuantSpec& spec);

}  // namespace qat::quant
