#pragma once
// The CUDA twins of quant/sim's ops: <op>.cu beside <op>.cpp, with the op's
// signature, called by the op when its input is on cuda; the per-element
// rules are quant/sim/math.h's, the argument checks the op's own. CUDA builds
// only (QAT_WITH_CUDA). Backward and what is saved: as the op's header says.
#include "core/tensor.h"
#include "quant/sim/lsq.h"
#include "quant/spec.h"

namespace qat::quant::cuda_twin {

// quant/sim/fake_quant.cu: per-tensor and per-channel, clipped STE mask as
// bytes on the device, or the plain STE.
Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, const QuantSpec& spec,
                     SteKind ste);

// quant/sim/lsq.cu: lsq_quantize (offset null) and lsq_plus_quantize, after
// the op's checks (check_lsq_args); `op` names it in errors.
Tensor lsq_quantize(const char* op, const Tensor& v, const Tensor& step, const Tensor* offset, const QuantSpec& spec,
                    float grad_scale, LsqClip clip);

}  // namespace qat::quant::cuda_twin
