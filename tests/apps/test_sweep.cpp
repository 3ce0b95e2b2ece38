// qat sweep: combinations and run names.
#include "tests/test_util.h"

#include "apps/sweep.h"

using namespace qat::apps;

TEST_CASE("sweep enumerates every combination, last key fastest", "[sweep]") {
  const auto c = sweep_combinations({{"quant.bits", {"8", "4"}}, {"quant.formula", {"minmax", "power_of_two"}}});
  REQUIRE(c.size() == 4);
  REQUIRE(c[0] == std::vector<std::string>{"quant.bits=8", "quant.formula=minmax"});
  REQUIRE(c[1] == std::vector<std::string>{"quant.bits=8", "quant.formula=power_of_two"});
  REQUIRE(c[3] == std::vector<std::string>{"quant.bits=4", "quant.formula=power_of_two"});
  REQUIRE(combination_name(c[1]) == "bits-8_formula-power_of_two");
  REQUIRE(combination_name({"quant.weight.symmetric=false"}) == "weight_symmetric-false");
  REQUIRE(sweep_combinations({}).size() == 1);
}
