// centred_grid_codes (the depthwise integer forward's input integers) runs
// in float and must give the double rule's codes and verdicts
// (InputRule::centred): on the grid, a hair inside the rule's 1e-3
// tolerance (where the float arithmetic alone would be unsure), a hair
// outside it, and off the range.
#include <cstring>
#include <vector>

#include "quant/int8_training/int8_cpu.h"
#include "tests/test_util.h"

using namespace qat::quant;
using namespace qat::quant::int8_cpu;

TEST_CASE("the depthwise forward's input integers in float are the double rule's, verdicts included",
          "[quant][intforward]") {
  const double offsets[] = {0.0, 9.5e-4, -9.5e-4, 9.9e-4, -9.9e-4, 1.05e-3, -1.05e-3, 0.3};  // in steps
  int64_t accepted_near_edge = 0, refused = 0;
  for (const double zero : {0.0, 128.0, 255.0})
    for (const float scale : {0.0173f, 3.1e-4f, 7.5f}) {
      const ActGrid grid{scale, zero, 256};
      const InputRule rule(grid);
      for (const double off : offsets) {
        std::vector<float> x;
        for (int u = -2; u < 258; ++u) {  // (two integers past each end of the range)
          const float on = scale * static_cast<float>(u - zero);  // a fake-quant output: one float product
          x.push_back(static_cast<float>(static_cast<double>(on) + off * scale));
        }
        std::vector<float> v(x.size()), w(x.size());
        int32_t any_inside = 0;  // the double rule's verdict on the values inside the range
        for (size_t i = 0; i < x.size(); ++i) {
          INFO("zero " << zero << " scale " << scale << " offset " << off << " value " << x[i]);
          const int32_t got = centred_grid_codes(&x[i], 1, rule, &v[i]);
          const int32_t want = rule.centred(x[i], w[i]);
          REQUIRE(got == want);
          REQUIRE(std::memcmp(&v[i], &w[i], sizeof(float)) == 0);
          accepted_near_edge += want == 0 && std::abs(off) > 9e-4;
          refused += want != 0;
          if (i >= 2 && i + 2 < x.size()) any_inside |= want;
        }
        // A whole run: refused if any value is, else the same codes.
        const int32_t run = centred_grid_codes(x.data(), static_cast<int64_t>(x.size()), rule, v.data());
        REQUIRE(run != 0);  // (the values past the range's ends)
        const int64_t inside = static_cast<int64_t>(x.size()) - 4;
        std::vector<float> in_range(x.begin() + 2, x.end() - 2), codes(in_range.size());
        const int32_t in_run = centred_grid_codes(in_range.data(), inside, rule, codes.data());
        REQUIRE(in_run == any_inside);
        if (std::abs(off) > 1.02e-3) CHECK(in_run != 0);
        if (in_run == 0)
          for (int64_t i = 0; i < inside; ++i) REQUIRE(codes[i] == static_cast<float>(i - zero));
      }
    }
  CHECK(accepted_near_edge > 1000);  // the cases where only the double rule can decide
  CHECK(refused > 1000);
}
