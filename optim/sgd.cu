// The CUDA twin of SGD's update (optim/sgd.cpp): the rules of optim/math.h.
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "optim/cuda_twins.h"

namespace qat::cuda_twin {

namespace {

__global__ void sgd_plain_kernel(float* __restrict__ p, const float* __restrict__ g, int64_t n,
                                 optim_math::SgdCoefs c) {
  QAT_GRID_STRIDE_LOOP(i, n) optim_math::sgd_plain_update(p[i], g[i], c);
}

__global__ void sgd_momentum_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                                    int64_t n, optim_math::SgdCoefs c) {
  QAT_GRID_STRIDE_LOOP(i, n) optim_math::sgd_momentum_update(p[i], buf[i], g[i], c);
}

}  // namespace

void sgd_update(float* p, const float* g, float* momentum_buffer, int64_t n, const optim_math::SgdCoefs& c) {
  if (n == 0) return;
  if (momentum_buffer == nullptr) {
    sgd_plain_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(p, g, n, c);
    QAT_CUDA_CHECK_LAUNCH(sgd_plain_kernel);
  } else {
    sgd_momentum_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(p, g, momentum_buffer, n, c);
    QAT_CUDA_CHECK_LAUNCH(sgd_momentum_kernel);
  }
}

}  // namespace qat::cuda_twin
