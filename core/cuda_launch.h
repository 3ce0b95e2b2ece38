#pragma once
// Launch shapes for the elementwise kernels of the CUDA twins (<op>.cu):
// one-dimensional grids with a grid-stride loop. Included by .cu files only.
#include <algorithm>
#include <cstdint>

namespace qat::cuda {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill every current GPU many times over; a grid-stride
// loop covers the rest of a larger tensor.
constexpr int64_t kMaxBlocks = 8192;

// Blocks for n > 0 elements.
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks));
}

}  // namespace qat::cuda

// for (int64_t i = first index of this thread; i < n; i += threads in the grid)
#define QAT_GRID_STRIDE_LOOP(i, n)                                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);             \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
