#pragma once
// Per-channel sums on the device, for the gradients of a bias (linear) and of
// batch norm in eval: for each channel c of a contiguous tensor read as
// (outer, channels, inner) (op_math::channel_of), the sums over its
// outer*inner elements i = op_math::channel_element(c, j, ...) of each of
// kTerms terms. One block per channel (a grid-stride loop over channels
// beyond kMaxBlocks), double accumulators per thread, a tree reduction in
// shared memory, the totals written as float: out[t * channels + c].
// Included by .cu files only.
#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/math.h"

namespace qat::cuda {

constexpr int kSumThreads = 256;  // a power of two: the tree halves it

// Terms: a copyable functor with
//   __device__ void operator()(int64_t i, int64_t c, double (&acc)[kTerms]) const
// that adds element i's terms (in channel c) to acc.
template <int kTerms, class Terms>
__global__ void channel_sums_kernel(Terms terms, int64_t channels, int64_t inner, int64_t per_channel,
                                    float* __restrict__ out) {
  __shared__ double partial[kTerms][kSumThreads];
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    double acc[kTerms] = {};
    for (int64_t j = tid; j < per_channel; j += kSumThreads)
      terms(op_math::channel_element(c, j, channels, inner), c, acc);
    for (int t = 0; t < kTerms; ++t) partial[t][tid] = acc[t];
    __syncthreads();
    for (int half = kSumThreads / 2; half > 0; half /= 2) {
      if (tid < half)
        for (int t = 0; t < kTerms; ++t) partial[t][tid] += partial[t][tid + half];
      __syncthreads();
    }
    if (tid == 0)
      for (int t = 0; t < kTerms; ++t) out[t * channels + c] = static_cast<float>(partial[t][0]);
    __syncthreads();  // partial is reused by this block's next channel
  }
}

// out: kTerms * channels floats on the device. Nothing to do for no channels;
// a channel without elements sums to 0.
template <int kTerms, class Terms>
void channel_sums(const Terms& terms, int64_t outer, int64_t channels, int64_t inner, float* out) {
  if (channels == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(channels, kMaxBlocks));
  channel_sums_kernel<kTerms><<<blocks, kSumThreads>>>(terms, channels, inner, outer * inner, out);
  QAT_CUDA_CHECK_LAUNCH(channel_sums_kernel);
}

}  // namespace qat::cuda
