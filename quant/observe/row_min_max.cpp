#include "quant/observe/row_min_max.h"

#include <immintrin.h>

#include <cstring>
#include <limits>

#include "core/cpu_features.h"

namespace qat::quant {

namespace {

// Rows far larger than the caches (AlexNet's linear weights, 36 KB a row,
// read once a step from memory): the hardware prefetcher stops at each 4 KB
// page, so the loop asks for the lines a page ahead itself (12 -> 9.7 ms for
// fc6 + fc7 per step, AMD Zen 5). A prefetch past the row's end is harmless.
constexpr int64_t kPrefetchAhead = 1024;  // floats: 4 KB
constexpr float kInf = std::numeric_limits<float>::infinity();

// The lanes' scan, written once for both widths with GCC's vector
// extensions (which Clang shares): on vectors, v < m ? v : m compiles to
// MINPS(v, m) and v > m ? v : m to MAXPS(v, m), whose rule for a NaN
// operand (the second one) is the scalar scan's, so each lane runs the
// scalar scan over its own elements. Four accumulators of each kind; the
// lines a page ahead asked for as the rows stream by.
template <int W>
[[gnu::always_inline]] inline void scan_lanes(const float* row, int64_t n, int64_t& done, float& lo, float& hi) {
  typedef float V __attribute__((vector_size(4 * W)));
  constexpr int64_t kStep = 4 * W;
  V mn[4], mx[4];
  for (int k = 0; k < 4; ++k) mn[k] = V{} + kInf, mx[k] = V{} - kInf;
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    for (int64_t line = 0; line < kStep; line += 16)
      _mm_prefetch(reinterpret_cast<const char*>(row + i + kPrefetchAhead + line), _MM_HINT_T0);
    for (int k = 0; k < 4; ++k) {
      V v;  // memcpy, not a function returning V: that would be an ABI the caller's target decides
      std::memcpy(&v, row + i + W * k, sizeof v);
      mn[k] = v < mn[k] ? v : mn[k];
      mx[k] = v > mx[k] ? v : mx[k];
    }
  }
  for (; i + W <= n; i += W) {
    V v;
    std::memcpy(&v, row + i, sizeof v);
    mn[0] = v < mn[0] ? v : mn[0];
    mx[0] = v > mx[0] ? v : mx[0];
  }
  float a[kStep], b[kStep];
  std::memcpy(a, mn, sizeof a);
  std::memcpy(b, mx, sizeof b);
  for (int64_t j = 0; j < kStep; ++j) lo = a[j] < lo ? a[j] : lo, hi = b[j] > hi ? b[j] : hi;
  done = i;
}

__attribute__((target("avx512f"))) void lanes_avx512(const float* row, int64_t n, int64_t& done, float& lo, float& hi) {
  scan_lanes<16>(row, n, done, lo, hi);
}

__attribute__((target("avx2"))) void lanes_avx2(const float* row, int64_t n, int64_t& done, float& lo, float& hi) {
  scan_lanes<8>(row, n, done, lo, hi);
}

// The scan keeps the first zero it meets; merged lanes may not.
float first_zero(const float* row, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (row[i] == 0.0f) return row[i];
  return 0.0f;  // unreachable when called on a zero result
}

}  // namespace

void row_min_max_scalar(const float* row, int64_t n, float& lo, float& hi) {
  float mn = kInf, mx = -kInf;  // locals: through references the loop would reload
  for (int64_t i = 0; i < n; ++i) {
    mn = row[i] < mn ? row[i] : mn;
    mx = row[i] > mx ? row[i] : mx;
  }
  lo = mn, hi = mx;
}

void row_min_max(const float* row, int64_t n, float& lo, float& hi, RowLanes lanes) {
  float mn = kInf, mx = -kInf;
  int64_t done = 0;
  if (lanes == RowLanes::avx512)
    lanes_avx512(row, n, done, mn, mx);
  else if (lanes == RowLanes::avx2)
    lanes_avx2(row, n, done, mn, mx);
  for (int64_t i = done; i < n; ++i) {
    mn = row[i] < mn ? row[i] : mn;
    mx = row[i] > mx ? row[i] : mx;
  }
  if (mn == 0.0f) mn = first_zero(row, n);
  if (mx == 0.0f) mx = first_zero(row, n);
  lo = mn, hi = mx;
}

void row_min_max(const float* row, int64_t n, float& lo, float& hi) {
  static const RowLanes best = best_row_lanes();
  row_min_max(row, n, lo, hi, best);
}

}  // namespace qat::quant
