// The network's input: float NCHW images -> u8 NHWC on the first layer's
// input grid (the fake-quant rounding, int_kernels.h: quantize_input).
#include "quant/integer/int_kernels.h"
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"

namespace qat::quant::ops {

namespace {

Tensor run_quantize_input(const IntLayer& l, const Tensor& x, GemmKernel) {
  QAT_CHECK(x.dtype() == DType::f32 && x.dim() == 4, "integer model input: expects float images (N, C, H, W), got ",
            dtype_name(x.dtype()), " with ", x.dim(), " dims");
  const Tensor xc = x.contiguous();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  Tensor y = Tensor::empty({N, H, W, C}, DType::u8);
  quantize_input(xc.data<float>(), N, C, H, W, l.out.scale, l.out.zero_point, l.out.zero_frac, l.out.qmin(),
                 l.out.qmax(), l.out.offset(), y.data<uint8_t>());
  return y;
}

ActShape infer_quantize_input(const IntLayer& l, const ActShape& in) {
  need_image(l, in);
  return checked_shape(l, in);
}

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kQuantizeInputOp{
    IntOp::quantize_input, "quantize_input", kFloatInput, ops::run_quantize_input, nullptr, ops::infer_quantize_input};
}  // namespace qat::quant
