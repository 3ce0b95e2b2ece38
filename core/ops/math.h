#pragma once
// Per-element rules of core's ops, shared by the CPU loops (<op>.cpp) and
// their CUDA twins (<op>.cu), so that the CPU tests cover the arithmetic both
// run (DESIGN.md, convention 1). Pure functions of floats; no state.
#include "core/host_device.h"

namespace qat::op_math {

// relu(x) = x > 0 ? x : 0. NaN and -0 give +0.
QAT_HOST_DEVICE inline float relu_value(float x) { return x > 0.f ? x : 0.f; }

// ReLU's gradient from its output y (y > 0 exactly where x > 0): g there, else 0.
QAT_HOST_DEVICE inline float relu_grad(float y, float g) { return y > 0.f ? g : 0.f; }

}  // namespace qat::op_math
