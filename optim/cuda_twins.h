#pragma once
// The CUDA twins of the optimizers' per-parameter updates (<optimizer>.cu
// beside <optimizer>.cpp): the element rules of optim/math.h over device
// memory. CUDA builds only (QAT_WITH_CUDA).
#include <cstdint>

#include "optim/math.h"

namespace qat::cuda_twin {

// momentum_buffer: nullptr when c.momentum == 0.
void sgd_update(float* p, const float* g, float* momentum_buffer, int64_t n, const optim_math::SgdCoefs& c);  // optim/sgd.cu
void adamw_update(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const optim_math::AdamWCoefs& c);  // optim/adamw.cu

}  // namespace qat::cuda_twin
