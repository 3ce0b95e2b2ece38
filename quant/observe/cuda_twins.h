#pragma once
// The CUDA twins of quant/observe's reductions (<file>.cu beside
// <file>.cpp), sharing their per-index bodies with a host test
// (minmax_math.h). CUDA builds only (QAT_WITH_CUDA).
#include "core/tensor.h"
#include "quant/observe/channel_geometry.h"

namespace qat::quant::cuda_twin {

// reduce_minmax (minmax.h) of a contiguous cuda tensor laid out as `g`: the
// C per-channel results are written to host memory.
void reduce_minmax(const Tensor& x, const ChannelGeometry& g, float* cur_min, float* cur_max);  // minmax.cu

}  // namespace qat::quant::cuda_twin
