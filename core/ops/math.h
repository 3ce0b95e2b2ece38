#pragma once
// Per-element rules of core's ops, shared by the CPU loops (<op>.cpp) and
// their CUDA twins (<op>.cu), so that the CPU tests cover the arithmetic both
// run (DESIGN.md, convention 1). Pure functions of numbers; no state.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace qat::op_math {

// relu(x) = x > 0 ? x : 0. NaN and -0 give +0.
QAT_HOST_DEVICE inline float relu_value(float x) { return x > 0.f ? x : 0.f; }

// ReLU's gradient from its output y (y > 0 exactly where x > 0): g there, else 0.
QAT_HOST_DEVICE inline float relu_grad(float y, float g) { return y > 0.f ? g : 0.f; }

// Per-channel ops (bias, batch norm) read a tensor whose dim 1 is the channel as
// (outer, channels, inner): (N,C) is inner = 1, (N,C,H,W) is inner = H*W.
// channel_of: the channel of flat index i. channel_element: the flat index of
// element j (0 <= j < outer*inner) of channel c, the order in which a
// per-channel sum visits them (outer index first, then inner).
QAT_HOST_DEVICE inline int64_t channel_of(int64_t i, int64_t channels, int64_t inner) {
  return (i / inner) % channels;
}
QAT_HOST_DEVICE inline int64_t channel_element(int64_t c, int64_t j, int64_t channels, int64_t inner) {
  return ((j / inner) * channels + c) * inner + j % inner;
}

// Batch norm's 1/sqrt(var + eps), the scale that normalises a channel.
QAT_HOST_DEVICE inline float bn_inv_std(float var, float eps) { return 1.f / sqrtf(var + eps); }

// Batch norm's gradient with fixed statistics (eval): dx = (gamma * istd) * g,
// the product gamma * istd first, as the CPU loop hoists it per channel.
QAT_HOST_DEVICE inline float bn_eval_grad(float g, float gamma, float istd) {
  const float k = gamma * istd;
  return k * g;
}

}  // namespace qat::op_math
