#pragma once
// Fixed-point requantization (docs/math/requantization.md §4, gemmlowp's arithmetic): a real
// multiplier M = s_x s_w / s_y is represented as M0 * 2^-31 * 2^-shift with
// M0 an int32 in [2^30, 2^31); an int32 accumulator x becomes
//   RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x, M0), shift).
// Rounding rule: the high multiply rounds ties upwards (gemmlowp's nudge:
// -0.5 -> 0, +0.5 -> 1), the shift rounds half away from zero, so the result is
// within 1 of round(x * M), and equal to it unless the intermediate lands
// exactly on a tie of the second rounding (tested).
// No floating point once the multiplier is built. The integer model rounds
// once (int_kernels.h: requantize_value); these two-step functions are the
// gemmlowp reference the tests compare it with.
#include <cstdint>

namespace qat::quant {

struct FixedPointMultiplier {
  int32_t m0 = 0;  // in [2^30, 2^31), or 0 for M == 0
  int shift = 0;   // right shift after the high multiply; negative = left shift (M >= 1)
};

// M must be finite and >= 0; M < 2^31.
FixedPointMultiplier quantize_multiplier(double m);
double multiplier_value(const FixedPointMultiplier& f);  // M0 * 2^(-31 - shift), for tests and reports

// (a * b * 2) >> 32 rounded, ties upwards, saturating the one overflow
// case (INT32_MIN * INT32_MIN).
inline int32_t saturating_rounding_doubling_high_mul(int32_t a, int32_t b) {
  if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
  const int64_t ab = static_cast<int64_t>(a) * static_cast<int64_t>(b);
  const int64_t nudge = ab >= 0 ? (int64_t{1} << 30) : (1 - (int64_t{1} << 30));
  return static_cast<int32_t>((ab + nudge) / (int64_t{1} << 31));
}

// x / 2^exponent rounded half away from zero; exponent in [0, 31].
inline int32_t rounding_divide_by_pot(int32_t x, int exponent) {
  const int32_t mask = static_cast<int32_t>((int64_t{1} << exponent) - 1);
  const int32_t remainder = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

int32_t multiply_by_quantized_multiplier(int32_t x, const FixedPointMultiplier& f);

}  // namespace qat::quant
