#pragma once
// The min and max of a row of floats, exactly as the scalar scan
//   mn = v < mn ? v : mn;  mx = v > mx ? v : mx;   (from +inf / -inf)
// gives them: NaNs are ignored (an all-NaN or empty row gives +inf / -inf),
// and of +0 and -0 the one met first is kept. The scan is a chain of
// dependent compares (3-4 cycles an element), the cost of observing a
// weight row; here it runs on 16 or 8 lanes (AVX-512 / AVX2, chosen at run
// time), each lane keeping the scan's semantics, and the lanes are merged
// with the sign of a zero result taken from the row's first zero.
#include <cstdint>

#include "core/cpu_features.h"

namespace qat::quant {

void row_min_max(const float* row, int64_t n, float& lo, float& hi);
// The plain scan, for the tests and CPUs without AVX2.
void row_min_max_scalar(const float* row, int64_t n, float& lo, float& hi);
// With the lanes of one instruction set (the tests run each the CPU has).
void row_min_max(const float* row, int64_t n, float& lo, float& hi, RowLanes lanes);

}  // namespace qat::quant
