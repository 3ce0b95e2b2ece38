#include "quant/integer/int_add.h"

#include <cmath>

#include "core/error.h"
#include "quant/integer/cpu_exec.h"
#include "quant/integer/integer_model.h"

namespace qat::quant {

namespace {
// b null: one input (M_b = 0, b's zero point a's).
AddRequant requant_of(const ActQuant& a, const ActQuant* b, const ActQuant& y, bool relu, const std::string& who) {
  QAT_CHECK(a.valid() && (!b || b->valid()) && y.valid(), who, ": integer requantization needs valid grids, got scales ",
            a.scale, b ? detail::cat(", ", b->scale) : std::string(), " -> ", y.scale);
  const double ra = static_cast<double>(a.scale) / y.scale, rb = b ? static_cast<double>(b->scale) / y.scale : 0.0;
  int e = 0;
  std::frexp(std::max(ra, rb), &e);  // max = f 2^e, f in [1/2, 1): max 2^(31 - e) in [2^30, 2^31)
  QAT_CHECK(e <= 30, who, ": input scale ", std::max(a.scale, b ? b->scale : 0.f),
            " is 2^30 or more times the output's ", y.scale, "; no fixed-point multiplier fits");
  AddRequant r;
  r.t = std::min(31 - e, 62);
  const double unit = std::ldexp(1.0, r.t);
  r.ma = std::llround(ra * unit), r.mb = std::llround(rb * unit);
  r.extra = std::llround((y.zero_frac - a.zero_frac * ra - (b ? b->zero_frac * rb : 0.0)) * unit);
  r.a_zero = a.zero_point + a.offset(), r.b_zero = b ? b->zero_point + b->offset() : r.a_zero;
  r.out_zero = y.zero_point + y.offset();
  r.lo = y.qmin() + y.offset(), r.hi = y.qmax() + y.offset();
  if (relu) r.lo = std::max(r.lo, r.out_zero);
  return r;
}
}  // namespace

AddRequant make_add_requant(const ActQuant& a, const ActQuant& b, const ActQuant& y, bool relu,
                            const std::string& who) {
  return requant_of(a, &b, y, relu, who + ": integer add");
}

AddRequant make_requant(const ActQuant& a, const ActQuant& y, const std::string& who) {
  return requant_of(a, nullptr, y, false, who);
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
