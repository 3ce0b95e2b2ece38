// Integer concat on channels (Note [integer concat]). Generic code only
// (int_forward.h), the CPU's included: one pass per input.
//
// Note [integer concat]
// prepare() quantizes a concat as one op with its own output quantizer (a
// node "<concat>_quant" after it); each branch keeps the grid its producer
// wrote. The fake-quant model concatenates the dequantized branches in
// float and rounds the result onto the output grid, so each value is
//   q_y = clamp(round(s_k (q_k - z_k - f_k) / s_y + f_y) + z_y, lo, hi)
// for the branch k it comes from: the integer add of Note [integer add] with
// one input (M_b = 0), the same fixed-point multiplier and one rounding. A
// branch already on the output grid (the same scale, zero point and bits) is
// copied byte for byte: its values are the output's exactly.
// Not built: placing one shared quantizer on every branch (TFLite's and
// TensorRT's rule, which makes every branch a copy); qat requantizes the
// branches whose grids differ instead.
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"

namespace qat::quant::ops {

namespace {

void finalize_concat(IntLayer& l) {
  const std::string who = "layer '" + l.name + "' (concat)";
  QAT_CHECK(!l.dequantize, who, ": a concat writes integers, it cannot dequantize");
  QAT_CHECK(l.concat_in.size() >= 2, who, ": joins at least two inputs, got ", l.concat_in.size(), " grids");
  l.in = l.concat_in[0];
  l.concat_requant.clear();
  for (size_t k = 0; k < l.concat_in.size(); ++k)
    l.concat_requant.push_back(make_requant(l.concat_in[k], l.out, who + ", input " + std::to_string(k)));
}

// The shape of the joined inputs (next_shape sums their channels).
ActShape infer_concat(const IntLayer& l, const ActShape& in) {
  need_image(l, in);
  return checked_shape(l, in);
}

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kConcatOp{IntOp::concat, "concat", kManyInputs, nullptr, ops::finalize_concat,
                                          ops::infer_concat};
}  // namespace qat::quant
