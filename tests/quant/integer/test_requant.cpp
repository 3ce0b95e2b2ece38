// Fixed-point requantization against exact rational rounding.
#include <cmath>

#include "tests/test_util.h"

#include "quant/integer/requant.h"

using namespace qat;
using namespace qat::quant;

namespace {
// round(x * M) with M = m0 * 2^-(31+shift), half away from zero, exactly (in
// 128-bit integers: no floating point).
int64_t exact_round(int32_t x, const FixedPointMultiplier& f) {
  const int total = 31 + f.shift;
  const __int128 p = static_cast<__int128>(x) * f.m0;
  const __int128 half = static_cast<__int128>(1) << (total - 1);
  const __int128 mag = p >= 0 ? p : -p;
  const __int128 q = (mag + half) >> total;
  return static_cast<int64_t>(p >= 0 ? q : -q);
}
}  // namespace

TEST_CASE("quantize_multiplier represents M with a 31-bit mantissa", "[quant][requant]") {
  Generator g(1);
  for (int i = 0; i < 2000; ++i) {
    const double m = std::ldexp(0.5 + 0.5 * g.uniform(), -static_cast<int>(g.below(20)));
    const FixedPointMultiplier f = quantize_multiplier(m);
    REQUIRE(f.m0 >= (1 << 30));
    REQUIRE(f.shift >= 0);
    REQUIRE(std::abs(multiplier_value(f) - m) <= std::ldexp(1.0, -31 - f.shift));
  }
  REQUIRE(quantize_multiplier(0.0).m0 == 0);
  REQUIRE(quantize_multiplier(1.0 - 1e-12).m0 == (1 << 30));  // rounds up to 1.0 and renormalises
  REQUIRE_THROWS(quantize_multiplier(-1.0));
}

TEST_CASE("requantization is within 1 of exact rounding and equal away from ties", "[quant][requant]") {
  // The documented rule: two roundings (to the 2^-31 grid, then by 2^shift).
  // They differ from one exact rounding only when the intermediate lands
  // exactly on a tie of the second step.
  Generator g(2);
  for (int i = 0; i < 200; ++i) {
    const double m = std::ldexp(0.5 + 0.5 * g.uniform(), -1 - static_cast<int>(g.below(16)));
    const FixedPointMultiplier f = quantize_multiplier(m);
    for (int j = 0; j < 500; ++j) {
      const int32_t x = static_cast<int32_t>(static_cast<int64_t>(g.next_u64() % (int64_t{1} << 32)) - (int64_t{1} << 31));
      const int64_t got = multiply_by_quantized_multiplier(x, f);
      const int64_t want = exact_round(x, f);
      REQUIRE(std::abs(got - want) <= 1);
      if (got != want) {
        const int64_t h = std::abs(static_cast<int64_t>(saturating_rounding_doubling_high_mul(x, f.m0)));
        REQUIRE(f.shift > 0);
        REQUIRE((h & ((int64_t{1} << f.shift) - 1)) == (int64_t{1} << (f.shift - 1)));
      }
    }
  }
}

TEST_CASE("rounding helpers follow gemmlowp", "[quant][requant]") {
  REQUIRE(saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX);
  REQUIRE(saturating_rounding_doubling_high_mul(1 << 30, 1 << 30) == (1 << 29));
  REQUIRE(rounding_divide_by_pot(5, 1) == 3);    // 2.5 -> 3 (away from zero)
  REQUIRE(rounding_divide_by_pot(-5, 1) == -3);  // -2.5 -> -3
  REQUIRE(rounding_divide_by_pot(7, 2) == 2);    // 1.75 -> 2
  REQUIRE(rounding_divide_by_pot(-6, 2) == -2);  // -1.5 -> -2
  REQUIRE(rounding_divide_by_pot(6, 0) == 6);
  // M >= 1 shifts left first
  const FixedPointMultiplier two = quantize_multiplier(2.0);
  REQUIRE(two.shift < 0);
  REQUIRE(multiply_by_quantized_multiplier(1000, two) == 2000);
}
