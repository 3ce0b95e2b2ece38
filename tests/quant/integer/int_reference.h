#pragma once
// Shared by the integer conv tests: an output's requantization by its
// definition, in 128-bit integers (docs/math/requantization.md).
#include <algorithm>
#include <cmath>

#include "quant/integer/integer_model.h"

namespace qat::testing {

// Channel c's output byte of layer l for the sum acc = Σ (x - z_x)(w - z_w)
// and centred = Σ (x - z_x) over the window (the fractional weight zero
// point's term): round half up of (acc + bias) M0 + residual - f_w M0
// centred over 2^(31 + shift), plus the output zero point, clamped.
inline uint8_t requantized(const quant::IntLayer& l, int64_t c, __int128 acc, __int128 centred) {
  const int64_t m0 = l.multiplier.data<int32_t>()[c];
  const int t = 31 + l.shift.data<int32_t>()[c];
  const int64_t frac_m0 = std::llround(static_cast<double>(l.weight_zero_frac.data<float>()[c]) * m0);
  const __int128 p = (acc + l.bias.data<int32_t>()[c]) * m0 + l.bias_residual.data<int32_t>()[c] - frac_m0 * centred;
  __int128 q = p >> t;  // floor(p / 2^t + 1/2)
  if (((p >> (t - 1)) & 1) != 0) q += 1;
  const int64_t lo = l.relu ? std::max<int64_t>(0, l.out.zero_point) : 0;
  return static_cast<uint8_t>(std::clamp<int64_t>(static_cast<int64_t>(q) + l.out.zero_point, lo, 255));
}

}  // namespace qat::testing
