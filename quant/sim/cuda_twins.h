#pragma once
// The CUDA twins of quant/sim's ops: <op>.cu beside <op>.cpp, with the op's
// signature, called by the op when its input is on cuda; the per-element
// rules are quant/sim/math.h's, the argument checks the op's own. CUDA builds
// only (QAT_WITH_CUDA). Backward and what is saved: as the op's header says.
#include "core/tensor.h"
#include "quant/spec.h"

namespace qat::quant::cuda_twin {

// quant/sim/fake_quant.cu: per-tensor and per-channel, clipped STE mask as
// bytes on the device, or the plain STE.
Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, const QuantSpec& spec,
                     SteKind ste);

}  // namespace qat::quant::cuda_twin
