#pragma once
// Per-element rules of core's ops, shared by the CPU loops (<op>.cpp) and
// their CUDA twins (<op>.cu), so that the CPU tests cover the arithmetic both
// run (docs/conventions.md, convention 1). Pure functions of floats; no state.
//
// Note [pinned fused multiply-add]: a rule with a product feeding a sum says
// which rounding it means. nvcc fuses `a * b + c` into one FMA by default,
// and GCC does so on the host as well with -march=native on an FMA CPU
// (-ffp-contract=fast, even across statements), but only where its optimiser
// happens to see the pattern. Such a rule calls mul_add (fmaf: one rounding,
// on every compiler and device), so the CPU op, its twin and the host test
// compute the same bits. A product that is the last operation is safe as is.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace qat::op_math {

// a * b + c with one rounding (Note [pinned fused multiply-add]).
QAT_HOST_DEVICE inline float mul_add(float a, float b, float c) { return fmaf(a, b, c); }
QAT_HOST_DEVICE inline double mul_add(double a, double b, double c) { return fma(a, b, c); }

// relu(x) = x > 0 ? x : 0. NaN and -0 give +0.
QAT_HOST_DEVICE inline float relu_value(float x) { return x > 0.f ? x : 0.f; }

// ReLU's gradient from its output y (y > 0 exactly where x > 0): g there, else 0.
QAT_HOST_DEVICE inline float relu_grad(float y, float g) { return y > 0.f ? g : 0.f; }

// relu6(x) = min(max(x, 0), 6) (MobileNetV2's activation); NaN gives 0, as relu.
QAT_HOST_DEVICE inline float relu6_value(float x) { return x > 0.f ? (x < 6.f ? x : 6.f) : 0.f; }
// Its gradient from its output y: g where 0 < x < 6 (0 < y < 6), else 0, as
// PyTorch's hardtanh backward (0 at the two kinks).
QAT_HOST_DEVICE inline float relu6_grad(float y, float g) { return y > 0.f && y < 6.f ? g : 0.f; }

// hardswish(x) = x relu6(x + 3) / 6 (MobileNetV3's activation), in
// PyTorch's operations and order (so -0 below -3, NaN for NaN).
QAT_HOST_DEVICE inline float hardswish_value(float x) { return x * fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f; }
// Its gradient from the input, as PyTorch's hardswish_backward: 0 below -3,
// g above 3, g (x / 3 + 1/2) on [-3, 3] (so 1.5 g at 3 and -0.5 g at -3).
QAT_HOST_DEVICE inline float hardswish_grad(float x, float g) {
  return x < -3.f ? 0.f : x <= 3.f ? g * (x / 3.f + 0.5f) : g;
}

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

// Tensor::add_: dst + alpha * src, one rounding (with alpha = 1 exactly dst + src).
QAT_HOST_DEVICE inline float add_scaled(float dst, float alpha, float src) { return mul_add(alpha, src, dst); }

// The binary elementwise ops (core/ops/elementwise.h), one IEEE operation each.
enum class BinaryOp { add, sub, mul, div };
QAT_HOST_DEVICE inline float binary_value(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
  }
  return a;  // not reached
}

}  // namespace qat::op_math
