#pragma once
// The dropout mask, on the CPU (core/ops/dropout.cpp) and on the device
// (core/ops/dropout.cu): a counter-based rule, a pure function of (key,
// element index), so every thread draws its own element with no shared state.
//
// Note [dropout mask]: one call of dropout draws one 64-bit key from its
// Generator (gen.next_u64(): the generator advances once per call, so runs
// reproduce from the seed and successive calls differ). Element i is dropped
// when dropout_uniform(key, i) < p (Generator::bernoulli's rule on a uniform
// of the same 24-bit grid). The uniform is SplitMix64's output i + 1 for the
// state `key` (its Weyl step, then its finaliser: Steele, Lea and Flood,
// "Fast splittable pseudorandom number generators", OOPSLA 2014). The CPU and
// the device drop the same elements for one seed. Backward recomputes the
// mask from the key (nothing saved).
#include <cstdint>

#include "core/host_device.h"

namespace qat::op_math {

QAT_HOST_DEVICE inline uint64_t splitmix64_at(uint64_t key, uint64_t index) {
  uint64_t z = key + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) on the grid of 2^-24 (exact floats), as Generator::uniform.
QAT_HOST_DEVICE inline float dropout_uniform(uint64_t key, int64_t i) {
  return static_cast<float>(splitmix64_at(key, static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
}

// The mask value of element i: 0 (dropped, probability p) or scale = 1/(1-p).
QAT_HOST_DEVICE inline float dropout_mask_at(uint64_t key, int64_t i, float p, float scale) {
  return dropout_uniform(key, i) < p ? 0.f : scale;
}

}  // namespace qat::op_math
