#pragma once
// The CUDA twins of quant/sim's ops: <op>.cu beside <op>.cpp, with the op's
// signature, called by the op when its input is on cuda; the per-element
// rules are quant/sim/math.h's, the argument checks the op's own. CUDA builds
// only (QAT_WITH_CUDA). Backward and what is saved: as the op's header says.
#include <functional>
#include <string>

#include "core/tensor.h"
#include "quant/sim/int8_math.h"
#include "quant/sim/int8_ops.h"
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

// quant/sim/int8_ops.cu: INT8 training's integer layer (int8_device.h) after
// the op's checks; x, wq and bias on cuda, w_scale on either device.
// pad_of: the padding's integer (checked after the weight and the input).
Tensor int8_layer(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                  const int8_math::Geometry& g, const std::function<uint8_t()>& pad_of,
                  const std::shared_ptr<Int8GradState>& state);
// ... and the values of its forward alone (QAT layers' integer forward, no
// autograd history); who: the layer as the errors name it.
Tensor int_forward_values(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                          const Tensor& bias, const int8_math::Geometry& g, const std::function<uint8_t()>& pad_of,
                          const std::string& who);

}  // namespace qat::quant::cuda_twin
