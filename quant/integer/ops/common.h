#pragma once
// Shared by the integer ops' files: input checks for run(), shape checks for
// infer() (int_op.h). Not part of the integer model's interface.
#include "core/checked.h"
#include "core/error.h"
#include "quant/integer/integer_model.h"

namespace qat::quant::ops {

// x must be a contiguous `dims`-d uint8 tensor; the error names the layer.
inline void check_u8(const IntLayer& l, const Tensor& x, int64_t dims) {
  QAT_CHECK(x.dtype() == DType::u8 && x.dim() == dims && x.is_contiguous(), "integer layer '", l.name, "' (",
            int_op_name(l.op), "): expects a contiguous ", dims, "-d uint8 tensor, got ", dtype_name(x.dtype()),
            " with ", x.dim(), " dims");
}

inline void need_image(const IntLayer& l, const ActShape& in) {
  QAT_CHECK(!in.flat, "layer '", l.name, "' (", int_op_name(l.op), "): needs an image input, got ", in.c,
            " flat features");
}

inline void need_flat(const IntLayer& l, const ActShape& in) {
  QAT_CHECK(in.flat, "layer '", l.name, "' (", int_op_name(l.op), "): needs flat features, got an image ", in.h, "x",
            in.w, "x", in.c, " (add a flatten before it)");
}

// The shape of an output, its size checked against kMaxActivationElems.
inline ActShape checked_shape(const IntLayer& l, ActShape s) {
  const char* what = "integer layer output";
  const int64_t n = checked_mul(checked_mul(s.h, s.w, what), s.c, what);
  QAT_CHECK(s.h >= 1 && s.w >= 1 && s.c >= 1 && n <= kMaxActivationElems, "layer '", l.name, "' (", int_op_name(l.op),
            "): output ", s.h, "x", s.w, "x", s.c, " is empty or larger than ", kMaxActivationElems, " values");
  return s;
}

}  // namespace qat::quant::ops
