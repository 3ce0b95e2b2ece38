// Every enum with a name table: the names are the ones configs and
// manifests use, and name -> value -> name round-trips for each.
#include <catch2/catch.hpp>

#include "apps/config.h"
#include "quant/backend.h"
#include "quant/integer/int8_gemm.h"
#include "quant/spec.h"

using namespace qat;

namespace {

// Each name maps back to its value, the values are 0..N-1 once each (no gap
// in the table; together with the expected name list, which lists every
// value of the enum, no value lacks a name), and an unknown name maps to
// nothing.
template <class E>
void check_table(const std::string& names) {
  INFO(names);
  CHECK(enum_name_list<E>() == names);
  const auto table = enum_names(E{});
  for (size_t i = 0; i < table.size(); ++i) {
    INFO(table[i].name);
    CHECK(static_cast<size_t>(table[i].value) == i);
    CHECK(enum_from_name<E>(table[i].name) == table[i].value);
    CHECK(std::string(enum_name(table[i].value)) == table[i].name);
  }
  CHECK_FALSE(enum_from_name<E>("no_such_name").has_value());
}

}  // namespace

TEST_CASE("enum tables: every enum's names, and name -> value -> name", "[enum_names]") {
  check_table<quant::QuantMethod>("minmax, moving_average, lsq, lsq_plus");
  check_table<quant::SteKind>("clipped, plain");
  check_table<quant::ScaleFormula>("minmax, power_of_two, amax_over_qmax");
  check_table<quant::Pattern>(
      "conv, conv+relu, conv+bn, conv+bn+relu, linear, linear+relu, conv+relu6, conv+bn+relu6, add, add+relu, concat");
  check_table<quant::GemmKernel>("reference, avx2, avx_vnni, avx512_vnni, amx, amx_emulated");
  check_table<apps::OptimizerKind>("sgd, adamw");
  check_table<LrScheduleKind>("constant, step, multistep, cosine");
  check_table<apps::BadImagePolicy>("error, skip");
  check_table<apps::Choice>("auto, true, false");
  check_table<apps::FormulaChoice>("auto, minmax, power_of_two, amax_over_qmax");
}

TEST_CASE("enum tables: the quant name functions read the tables", "[enum_names]") {
  CHECK(std::string(quant::method_name(quant::QuantMethod::lsq_plus)) == "lsq_plus");
  CHECK(std::string(quant::pattern_name(quant::Pattern::conv_bn_relu)) == "conv+bn+relu");
  CHECK(std::string(quant::gemm_kernel_name(quant::GemmKernel::avx512_vnni)) == "avx512_vnni");
}

TEST_CASE("enum tables: auto choices map to the quant config's optionals", "[enum_names]") {
  CHECK_FALSE(apps::choice_value(apps::Choice::auto_).has_value());
  CHECK(apps::choice_value(apps::Choice::yes) == std::optional<bool>(true));
  CHECK(apps::choice_value(apps::Choice::no) == std::optional<bool>(false));
  CHECK_FALSE(apps::formula_value(apps::FormulaChoice::auto_).has_value());
  CHECK(apps::formula_value(apps::FormulaChoice::minmax) == quant::ScaleFormula::minmax);
  CHECK(apps::formula_value(apps::FormulaChoice::power_of_two) == quant::ScaleFormula::power_of_two);
  CHECK(apps::formula_value(apps::FormulaChoice::amax_over_qmax) == quant::ScaleFormula::amax_over_qmax);
}
