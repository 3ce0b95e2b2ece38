#pragma once
// Inverted dropout: in training each element is zeroed with probability p and
// the rest scaled by 1/(1-p); in eval (or p == 0) the input passes unchanged.
// The mask comes from `gen` (seeded, reproducible). Backward: g * mask/(1-p).
// On cuda the mask follows its own rule from one draw of `gen` (Note [device
// dropout mask], core/ops/dropout_math.h): reproducible, but not the CPU's
// mask for the same seed.
#include "core/generator.h"
#include "core/tensor.h"

namespace qat {
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);
}
