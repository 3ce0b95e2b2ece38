#include "quant/integer/int_add.h"

#include <cmath>

#include "core/error.h"
#include "quant/integer/cpu_exec.h"
#include "quant/integer/integer_model.h"

namespace qat::quant {

AddRequant make_add_requant(const ActQuant& a, const ActQuant& b, const ActQuant& y, bool relu,
                            const std::string& who) {
  QAT_CHECK(a.valid() && b.valid() && y.valid(), who, ": integer add needs valid grids, got scales ", a.scale, ", ",
            b.scale, " -> ", y.scale);
  const double ra = static_cast<double>(a.scale) / y.scale, rb = static_cast<double>(b.scale) / y.scale;
  int e = 0;
  std::frexp(std::max(ra, rb), &e);  // max = f 2^e, f in [1/2, 1): max 2^(31 - e) in [2^30, 2^31)
  QAT_CHECK(e <= 30, who, ": integer add: input scale ", std::max(a.scale, b.scale), " is 2^30 or more times the output's ",
            y.scale, "; no fixed-point multiplier fits");
  AddRequant r;
  r.t = std::min(31 - e, 62);
  const double unit = std::ldexp(1.0, r.t);
  r.ma = std::llround(ra * unit), r.mb = std::llround(rb * unit);
  r.extra = std::llround((y.zero_frac - a.zero_frac * ra - b.zero_frac * rb) * unit);
  r.a_zero = a.zero_point + a.offset(), r.b_zero = b.zero_point + b.offset();
  r.out_zero = y.zero_point + y.offset();
  r.lo = y.qmin() + y.offset(), r.hi = y.qmax() + y.offset();
  if (relu) r.lo = std::max(r.lo, r.out_zero);
  return r;
}

Tensor integer_add_cpu(const Tensor& a, const Tensor& b, const AddRequant& r, const std::string& who) {
  QAT_CHECK(a.dtype() == DType::u8 && b.dtype() == DType::u8 && a.is_contiguous() && b.is_contiguous() &&
                a.sizes() == b.sizes(),
            who, ": integer add of contiguous uint8 tensors of one shape, got ", dtype_name(a.dtype()), " ", a.sizes(),
            " and ", dtype_name(b.dtype()), " ", b.sizes());
  CpuExec ex;
  return integer_add(ex, a, b, r);
}

}  // namespace qat::quant
