#pragma once
// The CUDA twins of core's ops: <op>.cu beside <op>.cpp, with the op's
// signature. The op checks its arguments, then calls its twin when the input
// is on cuda; the twin shares the per-element rules of core/ops/math.h. CUDA
// builds only (QAT_WITH_CUDA). What a twin saves for backward and how its
// gradient is written (overwrite or accumulate) is what the op's header says.
#include "core/tensor.h"

namespace qat::cuda_twin {

Tensor relu(const Tensor& x);  // core/ops/relu.cu

}  // namespace qat::cuda_twin
