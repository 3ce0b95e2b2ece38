#pragma once
// What lsq_quantize / lsq_plus_quantize read on the host before any element
// is touched, shared by the CPU op (lsq.cpp) and its CUDA twin (lsq.cu), so
// that both check the same arguments and use the same per-channel constants.
// Internal to quant/sim.
#include <vector>

#include "core/tensor.h"
#include "quant/sim/lsq.h"

namespace qat::quant {

// Per-channel constants: s = max(|p|, floor), 1/s, beta, sign(p)
// (Note [LSQ step positivity]).
struct LsqChannels {
  std::vector<float> s, inv, beta, sign;
};
LsqChannels lsq_channel_constants(const Tensor& step, const Tensor& offset, float floor);

// The checks of lsq.h: dtypes, shapes, v, step and offset on one device,
// grad_scale finite. offset: null for LSQ.
void check_lsq_args(const char* op, const Tensor& v, const Tensor& step, const Tensor* offset, const QuantSpec& spec,
                    float grad_scale);

}  // namespace qat::quant
