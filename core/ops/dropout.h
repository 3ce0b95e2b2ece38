#pragma once
// Inverted dropout: in training each element is zeroed with probability p and
// the rest scaled by 1/(1-p); in eval (or p == 0) the input passes unchanged.
// The mask comes from `gen` (seeded, reproducible). Backward: g * mask/(1-p).
#include "core/generator.h"
#include "core/tensor.h"

namespace qat {
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);
}
