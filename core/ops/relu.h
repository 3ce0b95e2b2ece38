#pragma once
// relu(x) = max(x, 0) (NaN gives 0); any shape, CPU or cuda (twin:
// core/ops/relu.cu). Backward: a fresh dx = g where x > 0, else 0 (saves the
// output, which is > 0 exactly where x is).
#include "core/tensor.h"

namespace qat {
Tensor relu(const Tensor& x);
// relu6(x) = min(max(x, 0), 6) (NaN gives 0); any shape, CPU only for now.
// Backward: a fresh dx = g where 0 < x < 6, else 0 (saves the output).
Tensor relu6(const Tensor& x);
// hardswish(x) = x relu6(x + 3) / 6; any shape, CPU only for now. Backward:
// PyTorch's (op_math::hardswish_grad, from the saved input).
Tensor hardswish(const Tensor& x);
}
