// core/enum_names.h: lookups by value and by name through an enum's table.
#include <catch2/catch.hpp>

#include "core/enum_names.h"

namespace {

enum class Shade { light, dark, very_dark };
constexpr auto enum_names(Shade) {
  return std::to_array<qat::EnumName<Shade>>(
      {{Shade::light, "light"}, {Shade::dark, "dark"}, {Shade::very_dark, "very_dark"}});
}

}  // namespace

TEST_CASE("enum_names: name by value, value by name, the list of names", "[enum_names]") {
  static_assert(qat::enum_name(Shade::dark)[0] == 'd', "usable at compile time");
  CHECK(std::string(qat::enum_name(Shade::very_dark)) == "very_dark");
  CHECK(qat::enum_from_name<Shade>("light") == Shade::light);
  CHECK_FALSE(qat::enum_from_name<Shade>("Light").has_value());
  CHECK_FALSE(qat::enum_from_name<Shade>("").has_value());
  CHECK(qat::enum_name_list<Shade>() == "light, dark, very_dark");
  // A value outside the table (a cast from a stray integer).
  CHECK(std::string(qat::enum_name(static_cast<Shade>(7))) == "?");
}
