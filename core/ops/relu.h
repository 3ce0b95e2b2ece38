#pragma once
// relu(x) = max(x, 0); any shape. Backward: g where x > 0, else 0 (saves x).
#include "core/tensor.h"

namespace qat {
Tensor relu(const Tensor& x);
}
