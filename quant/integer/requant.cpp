#include "quant/integer/requant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace qat::quant {

FixedPointMultiplier quantize_multiplier(double m) {
  QAT_CHECK(std::isfinite(m) && m >= 0.0 && m < 2147483648.0, "quantize_multiplier: multiplier must be in [0, 2^31), got ", m);
  if (m == 0.0) return {};
  int exp = 0;
  const double frac = std::frexp(m, &exp);  // m = frac * 2^exp, frac in [0.5, 1)
  int64_t q = std::llround(frac * 2147483648.0);  // frac * 2^31, in [2^30, 2^31]
  if (q == (int64_t{1} << 31)) {  // rounded up to 1.0: renormalise
    q /= 2;
    ++exp;
  }
  FixedPointMultiplier f{static_cast<int32_t>(q), -exp};
  QAT_CHECK(f.shift <= 31, "quantize_multiplier: multiplier ", m, " is too small (below 2^-32)");
  return f;
}

double multiplier_value(const FixedPointMultiplier& f) { return std::ldexp(static_cast<double>(f.m0), -31 - f.shift); }

int32_t multiply_by_quantized_multiplier(int32_t x, const FixedPointMultiplier& f) {
  if (f.shift >= 0) return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, f.m0), f.shift);
  // M >= 1: shift left first (saturating), then the high multiply.
  const int64_t shifted = static_cast<int64_t>(x) * (int64_t{1} << -f.shift);
  const int32_t sat = static_cast<int32_t>(std::clamp<int64_t>(shifted, std::numeric_limits<int32_t>::min(),
                                                                std::numeric_limits<int32_t>::max()));
  return saturating_rounding_doubling_high_mul(sat, f.m0);
}

}  // namespace qat::quant
