// The vectorised row min/max against the scalar scan it replaces, bit for
// bit (sign of zero included), on every length around the vector widths.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "quant/observe/row_min_max.h"
#include "tests/test_util.h"

using namespace qat;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Every lane width this CPU runs, and the dispatching entry point.
void require_same_as_scan(const std::vector<float>& row) {
  float lo, hi, slo, shi;
  const int64_t n = static_cast<int64_t>(row.size());
  quant::row_min_max_scalar(row.data(), n, slo, shi);
  for (const RowLanes lanes : {RowLanes::avx2, RowLanes::avx512}) {
    if (!row_lanes_run_here(lanes)) continue;
    quant::row_min_max(row.data(), n, lo, hi, lanes);
    INFO("lanes " << static_cast<int>(lanes) << " n " << n << " scan " << slo << " " << shi << " got " << lo << " "
                  << hi);
    REQUIRE(bits_of(lo) == bits_of(slo));
    REQUIRE(bits_of(hi) == bits_of(shi));
  }
  quant::row_min_max(row.data(), n, lo, hi);
  REQUIRE(bits_of(lo) == bits_of(slo));
  REQUIRE(bits_of(hi) == bits_of(shi));
}

}  // namespace

TEST_CASE("row min/max equals the scalar scan on every length, NaN, inf and both zeros", "[observer]") {
  for (const RowLanes lanes : {RowLanes::avx2, RowLanes::avx512})
    if (!row_lanes_run_here(lanes)) WARN("this CPU lacks lanes " << static_cast<int>(lanes) << ": not tested here");
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t n = 0; n <= 200; ++n) {
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = normal(gen);
    require_same_as_scan(row);
    if (n == 0) continue;
    std::uniform_int_distribution<int64_t> at(0, n - 1);
    row[static_cast<size_t>(at(gen))] = kNaN;
    require_same_as_scan(row);
    row[static_cast<size_t>(at(gen))] = -kInf;
    row[static_cast<size_t>(at(gen))] = kInf;
    require_same_as_scan(row);
    // Zero extremes: non-negative rows (min a zero) and non-positive ones
    // (max a zero), with +0 and -0 placed so lanes would disagree.
    for (float& v : row) v = std::abs(normal(gen)) + 1.f;
    for (int k = 0; k < 3; ++k) row[static_cast<size_t>(at(gen))] = k % 2 ? 0.f : -0.f;
    require_same_as_scan(row);
    for (float& v : row) v = v == 0.f ? v : -v;
    require_same_as_scan(row);
    std::fill(row.begin(), row.end(), kNaN);
    require_same_as_scan(row);  // +inf / -inf
  }
  // Both zeros, the one met first decides: -0 then +0 and +0 then -0, in
  // different lanes of every width.
  for (const bool negative_first : {true, false})
    for (int64_t gap : {1, 8, 16, 17, 33, 64}) {
      std::vector<float> row(130, 2.f);
      row[3] = negative_first ? -0.f : 0.f;
      row[static_cast<size_t>(3 + gap)] = negative_first ? 0.f : -0.f;
      require_same_as_scan(row);
    }
}
