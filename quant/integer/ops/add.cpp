// Integer add (Note [integer add]): two u8 activations of one shape on grids
// in and in2, requantized onto out (a ReLU: the lower clamp). Generic code
// only (int_forward.h), the CPU's included: one pass of one multiply-add per
// input and element.
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"

namespace qat::quant::ops {

namespace {

void finalize_add(IntLayer& l) {
  QAT_CHECK(!l.dequantize, "layer '", l.name, "' (add): an add writes integers, it cannot dequantize");
  l.add = make_add_requant(l.in, l.in2, l.out, l.relu, "layer '" + l.name + "' (add)");
}

ActShape infer_add(const IntLayer&, const ActShape& in) { return in; }

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kAddOp{IntOp::add, "add", kTwoInputs, nullptr, ops::finalize_add, ops::infer_add};
}  // namespace qat::quant
