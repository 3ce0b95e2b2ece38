#pragma once
// Size arithmetic that cannot wrap around: a product or sum of sizes that
// leaves int64 is an error naming what was being sized, never a small number
// that a later allocation or loop trusts.
#include <cstdint>

#include "core/error.h"

namespace qat {

inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  QAT_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " x ", b, " overflows a 64-bit size");
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  QAT_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows a 64-bit size");
  return r;
}

// The largest tensor any op may allocate, in bytes (2^40 = 1 TiB: far beyond
// any machine this runs on, small enough that no byte offset can wrap).
constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;

}  // namespace qat
