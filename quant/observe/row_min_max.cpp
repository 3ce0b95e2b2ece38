#include "quant/observe/row_min_max.h"

#include <immintrin.h>

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

// MINPS(a, b) is a < b ? a : b and MAXPS(a, b) is a > b ? a : b, NaN
// operands giving b: with the row value as a and the accumulator as b, each
// lane runs the scalar scan over its own elements. (The zero-masked forms
// with every lane live: GCC 12 warns about the plain ones' undefined
// pass-through operand.)
#define QAT_MIN16(a, b) _mm512_maskz_min_ps(0xFFFF, a, b)
#define QAT_MAX16(a, b) _mm512_maskz_max_ps(0xFFFF, a, b)
__attribute__((target("avx512f"))) void lanes_avx512(const float* row, int64_t n, int64_t& done, float& lo,
                                                     float& hi) {
  __m512 mn[4], mx[4];
  for (int k = 0; k < 4; ++k) mn[k] = _mm512_set1_ps(kInf), mx[k] = _mm512_set1_ps(-kInf);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) _mm_prefetch(reinterpret_cast<const char*>(row + i + kPrefetchAhead + 16 * k), _MM_HINT_T0);
    for (int k = 0; k < 4; ++k) {
      const __m512 v = _mm512_loadu_ps(row + i + 16 * k);
      mn[k] = QAT_MIN16(v, mn[k]);
      mx[k] = QAT_MAX16(v, mx[k]);
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(row + i);
    mn[0] = QAT_MIN16(v, mn[0]);
    mx[0] = QAT_MAX16(v, mx[0]);
  }
  alignas(64) float a[64], b[64];
  for (int k = 0; k < 4; ++k) _mm512_store_ps(a + 16 * k, mn[k]), _mm512_store_ps(b + 16 * k, mx[k]);
  for (int j = 0; j < 64; ++j) lo = a[j] < lo ? a[j] : lo, hi = b[j] > hi ? b[j] : hi;
  done = i;
}

__attribute__((target("avx2"))) void lanes_avx2(const float* row, int64_t n, int64_t& done, float& lo, float& hi) {
  __m256 mn[4], mx[4];
  for (int k = 0; k < 4; ++k) mn[k] = _mm256_set1_ps(kInf), mx[k] = _mm256_set1_ps(-kInf);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(row + i + 8 * k);
      mn[k] = _mm256_min_ps(v, mn[k]);
      mx[k] = _mm256_max_ps(v, mx[k]);
    }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(row + i);
    mn[0] = _mm256_min_ps(v, mn[0]);
    mx[0] = _mm256_max_ps(v, mx[0]);
  }
  alignas(32) float a[32], b[32];
  for (int k = 0; k < 4; ++k) _mm256_store_ps(a + 8 * k, mn[k]), _mm256_store_ps(b + 8 * k, mx[k]);
  for (int j = 0; j < 32; ++j) lo = a[j] < lo ? a[j] : lo, hi = b[j] > hi ? b[j] : hi;
  done = i;
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

bool row_lanes_run_here(RowLanes lanes) {
  switch (lanes) {
    case RowLanes::avx512: return cpu_has_avx512bw();
    case RowLanes::avx2: return cpu_has_avx2();
    default: return true;
  }
}

void row_min_max(const float* row, int64_t n, float& lo, float& hi, RowLanes lanes) {
  float mn = kInf, mx = -kInf;
  int64_t done = 0;
  if (lanes == RowLanes::avx512) lanes_avx512(row, n, done, mn, mx);
  else if (lanes == RowLanes::avx2) lanes_avx2(row, n, done, mn, mx);
  for (int64_t i = done; i < n; ++i) {
    mn = row[i] < mn ? row[i] : mn;
    mx = row[i] > mx ? row[i] : mx;
  }
  if (mn == 0.0f) mn = first_zero(row, n);
  if (mx == 0.0f) mx = first_zero(row, n);
  lo = mn, hi = mx;
}

void row_min_max(const float* row, int64_t n, float& lo, float& hi) {
  static const RowLanes best = cpu_has_avx512bw() ? RowLanes::avx512
                               : cpu_has_avx2()   ? RowLanes::avx2
                                                  : RowLanes::scalar;
  row_min_max(row, n, lo, hi, best);
}

}  // namespace qat::quant
