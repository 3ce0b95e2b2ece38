// INT8 training's weight codes row kernels (quant/sim/weight_codes.h,
// quantize_codes_row): every kernel this CPU runs gives the element rule's
// integers, sum and outside indices, on every tail length, across the
// vector kernels' 2^16-value chunks, with NaN, infinities, ties and values
// just inside and outside the grid.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/enum_names.h"
#include "core/generator.h"
#include "quant/sim/weight_codes.h"

using namespace qat;
using namespace qat::quant;

namespace {

std::vector<float> weights(int64_t n, float s, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = 50.f * s * gen.normal();
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), -0.0f, 2.5f * s, -3.5f * s, 127.5f * s,
                           -128.5f * s, 127.49f * s, -128.51f * s, 1e30f, -1e30f};
  for (size_t i = 0; i < std::size(special) && 7 * i + seed % 7 < v.size(); ++i) v[7 * i + seed % 7] = special[i];
  if (n > (1 << 16)) v[(1 << 16) - 1] = 300.f * s, v[1 << 16] = -300.f * s;  // at a chunk's edge
  return v;
}

}  // namespace

TEST_CASE("every weight-codes row kernel equals the element rule", "[quant][int8train]") {
  const float s = 0.02f, inv = 1.0f / s;
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  for (int64_t n : {64, 1001, (1 << 16) + 9}) lengths.push_back(n);
  for (const auto& [kernel, name] : enum_names(FqRowsKernel{})) {
    if (!fq_rows_kernel_runs_here(kernel)) continue;
    for (const float qmax : {127.f, 7.f}) {
      const float qmin = -qmax - 1.f;
      for (const int64_t n : lengths) {
        INFO(name << ", n = " << n << ", qmax = " << qmax);
        const std::vector<float> x = weights(n, s, static_cast<uint64_t>(n));
        std::vector<int8_t> want(x.size());
        std::vector<int64_t> want_out;
        int64_t want_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const float t = std::nearbyint(x[i] * inv);
          const bool in = t >= qmin && t <= qmax;
          if (!in) want_out.push_back(i);
          const float c = in ? t : (t > qmax ? qmax : qmin);  // NaN: qmin
          want[i] = static_cast<int8_t>(c);
          want_sum += static_cast<int64_t>(c);
        }
        std::vector<int8_t> q(x.size() + 1, 99);
        std::vector<int64_t> out;
        int64_t sum = -1;
        quantize_codes_row(kernel, x.data(), q.data(), n, inv, qmin, qmax, sum, out);
        REQUIRE(std::equal(want.begin(), want.end(), q.begin()));
        REQUIRE(q[n] == 99);  // nothing written past the row
        REQUIRE(sum == want_sum);
        REQUIRE(out == want_out);
      }
    }
  }
}
