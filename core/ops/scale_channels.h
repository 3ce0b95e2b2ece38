#pragma once
// y = x * s[c] along one axis (per-channel scaling: BN folding in QAT).
// x: any shape with x.size(axis) == C; s: (C).
// Backward (saves x and s): dx = g * s[c]; ds[c] = sum of g * x over channel c.
// One pass each way, parallel over channels (the broadcasting mul would need
// a general sum_to for ds).
#include "core/tensor.h"

namespace qat {
Tensor scale_channels(const Tensor& x, const Tensor& s, int64_t axis);
}
