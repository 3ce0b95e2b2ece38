// Ops that move or clamp integers without arithmetic: flatten (NHWC -> (N,
// C*H*W) in PyTorch's (c, h, w) order) and ReLU (the zero point as the floor).
// No CPU kernels of their own: every executor, the CPU's included, runs their
// generic code (int_forward.h).
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"

namespace qat::quant::ops {

namespace {

ActShape infer_flatten(const IntLayer& l, const ActShape& in) {
  need_image(l, in);
  const ActShape out = checked_shape(l, in);
  return {1, 1, out.h * out.w * out.c, true};
}

ActShape infer_relu(const IntLayer&, const ActShape& in) { return in; }

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kFlattenOp{IntOp::flatten, "flatten", 0, nullptr, nullptr, ops::infer_flatten};
extern constinit const IntOpDef kReluOp{IntOp::relu, "relu", 0, nullptr, nullptr, ops::infer_relu};
}  // namespace qat::quant
