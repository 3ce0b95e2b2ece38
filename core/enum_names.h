#pragma once
// The names of an enum's values, written once beside the enum as a function
// found by argument-dependent lookup:
//
//   enum class Color { red, green };
//   constexpr auto enum_names(Color) {
//     return std::to_array<EnumName<Color>>({{Color::red, "red"}, {Color::green, "green"}});
//   }
//
// enum_name(), enum_from_name() and enum_name_list() below then work for it,
// and so does everything built on them (YAML parsing in apps/, for one).
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace qat {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// "?" for a value the table lacks (a cast from an out-of-range integer).
template <class E>
constexpr const char* enum_name(E value) {
  for (const auto& n : enum_names(value))
    if (n.value == value) return n.name;
  return "?";
}

template <class E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& n : enum_names(E{}))
    if (name == n.name) return n.value;
  return std::nullopt;
}

// "a, b, c": the valid names, for error messages.
template <class E>
std::string enum_name_list() {
  std::string out;
  for (const auto& n : enum_names(E{})) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

}  // namespace qat
