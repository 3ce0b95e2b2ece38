#pragma once
// relu(x) = max(x, 0) (NaN gives 0); any shape, CPU or cuda (twin:
// core/ops/relu.cu). Backward: a fresh dx = g where x > 0, else 0 (saves the
// output, which is > 0 exactly where x is).
#include "core/tensor.h"

namespace qat {
Tensor relu(const Tensor& x);
}
