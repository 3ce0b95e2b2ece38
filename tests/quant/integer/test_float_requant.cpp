// The requantization's float first pass (Note [checked float
// requantization]): on plans with moderate addends, every accumulator that
// lands within a hair of an integer (where float rounding could pick the
// wrong side) still gets the exact result.
#include <algorithm>
#include <cmath>
#include <random>

#include "core/cpu_features.h"
#include "quant/integer/int_kernels.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

// A layer's requantization constants in the ranges 8-bit layers have:
// multipliers M = m0 2^-(31 + shift) in [2^-14, 2^-3], biases worth up to
// `bias_units` output steps, a residual; channel 0 a power of two with no
// bias (exact ties: v an integer).
struct Layer {
  std::vector<int32_t> bias, m0, shift, residual;
  RequantParams params(int32_t zero, int32_t lo, int32_t hi) const {
    return {bias.data(), m0.data(), shift.data(), residual.data(), zero, lo, hi};
  }
};

Layer make_layer(int64_t n, double bias_units, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> m_d(1 << 30, INT32_MAX), s_d(3, 13);
  std::uniform_real_distribution<double> u(-1, 1);
  Layer l{std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<int32_t>(n)};
  for (int64_t c = 0; c < n; ++c) {
    l.m0[c] = c == 0 ? (1 << 30) : m_d(rng);
    l.shift[c] = s_d(rng);
    const double M = std::ldexp(static_cast<double>(l.m0[c]), -31 - l.shift[c]);
    l.bias[c] = c == 0 ? 0 : static_cast<int32_t>(std::lround(u(rng) * bias_units / M));
    l.residual[c] = c == 0 ? 0 : static_cast<int32_t>(u(rng) * (l.m0[c] / 2));
  }
  return l;
}

// v(acc) = (acc + bias) M + r + 1/2 + z for channel c, exactly, as a
// fraction over 2^(31 + shift): the accumulators around every integer k of
// the clamp's neighbourhood, the last one below k and the first at or above
// it, and their neighbours.
std::vector<int32_t> accumulators_near_integers(const Layer& l, int64_t c, int32_t zero, int32_t lo, int32_t hi) {
  const int t = 31 + l.shift[c];
  const __int128 add = static_cast<__int128>(l.bias[c]) * l.m0[c] + l.residual[c] + (__int128{1} << (t - 1));
  std::vector<int32_t> out;
  for (int32_t k = lo - 2; k <= hi + 2; ++k) {
    // the least acc with acc m0 + add >= (k - z) 2^t
    const __int128 target = static_cast<__int128>(k - zero) << t;
    __int128 num = target - add, a = num / l.m0[c];
    while (a * l.m0[c] < num) ++a;
    while ((a - 1) * l.m0[c] >= num) --a;
    for (int d = -2; d <= 1; ++d) out.push_back(static_cast<int32_t>(a + d));
  }
  return out;
}

}  // namespace

TEST_CASE("the float first pass of requantization equals the exact path next to every integer", "[quant][integer]") {
  if (!cpu_has_avx512bw()) WARN("no AVX-512 here: the float first pass is not taken");
  std::mt19937 rng(17);
  // (16 and 48 channels: runs of 64 values; 20 and 7: rows with masked tails)
  for (int64_t n : {16, 48, 20, 7})
    for (const int32_t zero : {0, 128, 255})
      for (const int32_t hi : {255, 200}) {
        const Layer l = make_layer(n, 1500 - zero, rng);
        const int32_t lo = std::min(zero, 40);
        const RequantParams p = l.params(zero, lo, hi);
        const RequantPlan plan = make_requant_plan(p, n);
        if (plan.avx512) REQUIRE(plan.float_first);
        // rows of n: channel c's column holds its accumulators near integers, wide
        // values and, where a column runs out, 0
        std::vector<std::vector<int32_t>> columns;
        size_t rows = 0;
        for (int64_t c = 0; c < n; ++c) {
          columns.push_back(accumulators_near_integers(l, c, zero, lo, hi));
          for (int32_t wide : {INT32_MAX / 2 - 1, -INT32_MAX / 2 + 1, 1 << 24, -(1 << 24), 0})
            columns.back().push_back(wide);
          rows = std::max(rows, columns.back().size());
        }
        std::vector<int32_t> acc(rows * n, 0);
        for (int64_t c = 0; c < n; ++c)
          for (size_t r = 0; r < columns[c].size(); ++r) acc[r * n + c] = columns[c][r];
        std::vector<uint8_t> ref(acc.size()), fast(acc.size());
        for (size_t r = 0; r < rows; ++r) requantize_row_reference(acc.data() + r * n, n, p, ref.data() + r * n);
        requantize_rows(acc.data(), static_cast<int64_t>(rows), plan, fast.data());
        INFO("n " << n << ", zero " << zero << ", hi " << hi);
        REQUIRE(fast == ref);
        CHECK(std::count(ref.begin(), ref.end(), lo) > 0);
        CHECK(std::count(ref.begin(), ref.end(), hi) > 0);
      }
}

TEST_CASE("the float first pass is left out where an addend is beyond its bound", "[quant][integer]") {
  std::mt19937 rng(18);
  // bias 1800 output steps: |B| > 1792 for some channel
  Layer l = make_layer(16, 1000, rng);
  const double M = std::ldexp(static_cast<double>(l.m0[5]), -31 - l.shift[5]);
  l.bias[5] = static_cast<int32_t>(std::lround(1800 / M));
  const RequantPlan plan = make_requant_plan(l.params(0, 0, 255), 16);
  CHECK(!plan.float_first);
  l.bias[5] = static_cast<int32_t>(std::lround(1700 / M));
  l.residual[5] = 0;
  CHECK(make_requant_plan(l.params(0, 0, 255), 16).float_first == cpu_has_avx512bw());
}
