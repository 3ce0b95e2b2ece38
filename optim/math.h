#pragma once
// Per-element update rules of the optimizers (sgd.h, adamw.h for the math),
// shared by the CPU loops (<optimizer>.cpp) and their CUDA twins
// (<optimizer>.cu), so that the CPU tests cover the arithmetic both run
// (docs/conventions.md, convention 1). Each side's compiler may fuse a * b + c into one
// FMA (GCC for C++ and nvcc both do by default), so the two sides agree to
// rounding, not bit for bit.
#include "core/host_device.h"

namespace qat::optim_math {

// SGD's scalars for one parameter's update, in float32 as the loop uses them.
struct SgdCoefs {
  float lr = 0.f, weight_decay = 0.f, momentum = 0.f;
  float damp_keep = 1.f;  // 1 - dampening
  bool first = false;     // the parameter's first update: the buffer starts as g
  bool nesterov = false;
};

// momentum == 0: p -= lr * (g + wd p).
QAT_HOST_DEVICE inline void sgd_plain_update(float& p, float g, const SgdCoefs& c) {
  p -= c.lr * (g + c.weight_decay * p);
}

// momentum != 0: the buffer `buf` is updated and drives the step.
QAT_HOST_DEVICE inline void sgd_momentum_update(float& p, float& buf, float g, const SgdCoefs& c) {
  const float d = g + c.weight_decay * p;
  const float b = c.first ? d : c.momentum * buf + c.damp_keep * d;
  buf = b;
  p -= c.lr * (c.nesterov ? d + c.momentum * b : b);
}

// AdamW's scalars for one step, computed in double from the float32 lr as
// torch does, then used in float32.
struct AdamWCoefs {
  float decay, b1, c1, b2, c2, step_size, bc2_sqrt, eps;
};

// One AdamW element update in torch's order, for float or a SIMD vector of
// floats (T): sqrt is found by argument-dependent lookup for the vector type.
template <class T, class Sqrt>
QAT_HOST_DEVICE inline void adamw_update(T& p, T& m, T& v, const T& g, const AdamWCoefs& c, Sqrt sqrt_of) {
  m = c.b1 * m + c.c1 * g;
  v = c.b2 * v + c.c2 * g * g;
  p = p * c.decay - c.step_size * m / (sqrt_of(v) / c.bc2_sqrt + c.eps);
}

}  // namespace qat::optim_math
