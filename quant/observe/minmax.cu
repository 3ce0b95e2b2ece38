// The CUDA twin of reduce_minmax (quant/observe/minmax.cpp): the two
// per-index bodies of minmax_math.h as two kernels, then C pairs to the host.
#include <algorithm>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "quant/observe/cuda_twins.h"
#include "quant/observe/minmax_math.h"

namespace qat::quant::cuda_twin {

namespace {


// Index i = c * slots + s: slot s of channel c.
__global__ void slot_min_max_kernel(const float* __restrict__ x, ChannelGeometry g, int64_t slots,
                                    float* __restrict__ slot_min, float* __restrict__ slot_max) {
  QAT_GRID_STRIDE_LOOP(i, g.channels * slots) {
    minmax_math::slot_min_max(x, g, i / slots, i % slots, slots, slot_min[i], slot_max[i]);
  }
}

__global__ void channel_min_max_kernel(const float* __restrict__ slot_min, const float* __restrict__ slot_max,
                                       int64_t channels, int64_t slots, float* __restrict__ mn,
                                       float* __restrict__ mx) {
  QAT_GRID_STRIDE_LOOP(c, channels) minmax_math::channel_min_max(slot_min, slot_max, c, slots, mn[c], mx[c]);
}

}  // namespace

void reduce_minmax(const Tensor& x, const ChannelGeometry& g, float* cur_min, float* cur_max) {
  const int64_t C = g.channels, slots = slots_for(g);
  Tensor partial = Tensor::empty({2, C * slots}, DType::f32, Device::cuda);
  Tensor result = Tensor::empty({2, C}, DType::f32, Device::cuda);
  float* p = partial.device_data<float>();
  float* r = result.device_data<float>();
  slot_min_max_kernel<<<cuda::blocks_for(C * slots), cuda::kThreadsPerBlock>>>(x.device_data<float>(), g, slots, p,
                                                                               p + C * slots);
  QAT_CUDA_CHECK_LAUNCH(slot_min_max_kernel);
  channel_min_max_kernel<<<cuda::blocks_for(C), cuda::kThreadsPerBlock>>>(p, p + C * slots, C, slots, r, r + C);
  QAT_CUDA_CHECK_LAUNCH(channel_min_max_kernel);
  const std::vector<float> host = result.to_vector();  // waits for the kernels (one stream)
  std::copy(host.begin(), host.begin() + C, cur_min);
  std::copy(host.begin() + C, host.end(), cur_max);
}

}  // namespace qat::quant::cuda_twin
