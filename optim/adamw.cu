// The CUDA twin of AdamW's update (optim/adamw.cpp): the rule of optim/math.h.
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "optim/cuda_twins.h"

namespace qat::cuda_twin {

namespace {

struct DeviceSqrt {
  __device__ float operator()(float x) const { return sqrtf(x); }
};

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, optim_math::AdamWCoefs c) {
  QAT_GRID_STRIDE_LOOP(i, n) optim_math::adamw_update(p[i], m[i], v[i], g[i], c, DeviceSqrt{});
}

}  // namespace

void adamw_update(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const optim_math::AdamWCoefs& c) {
  if (n == 0) return;
  adamw_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(p, g, exp_avg, exp_avg_sq, n, c);
  QAT_CUDA_CHECK_LAUNCH(adamw_kernel);
}

}  // namespace qat::cuda_twin
