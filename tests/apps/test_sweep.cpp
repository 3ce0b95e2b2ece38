// qat sweep: combinations and run names.
#include "tests/test_util.h"

#include <csignal>

#include "apps/sweep.h"
#include "apps/train.h"

using namespace qat::apps;
using Catch::Matchers::Contains;

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

TEST_CASE("sweep refuses more combinations than it could run, before building them", "[sweep]") {
  const std::vector<std::string> ten = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  CHECK(sweep_combinations({{"a", ten}, {"b", ten}, {"c", ten}, {"d", ten}}).size() == 10000);
  REQUIRE_THROWS_WITH(sweep_combinations({{"a", ten}, {"b", ten}, {"c", ten}, {"d", ten}, {"e", {"x", "y"}}}),
                      Contains("more than 10000 combinations (at key e already 20000)"));
}

// A signal between a sweep's runs (or while one validates) must not be
// forgotten when the next run opens its own scope.
TEST_CASE("interrupt scopes nest: only the outermost clears the flag", "[sweep]") {
  {
    InterruptScope sweep;
    CHECK_FALSE(InterruptScope::interrupted());
    { InterruptScope first_run; }
    REQUIRE(std::raise(SIGINT) == 0);  // between two runs: the sweep's handler takes it
    CHECK(InterruptScope::interrupted());
    InterruptScope second_run;
    CHECK(InterruptScope::interrupted());
  }
  InterruptScope next_command;
  CHECK_FALSE(InterruptScope::interrupted());
}
