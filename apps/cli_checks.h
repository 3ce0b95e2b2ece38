#pragma once
// Command-line number checks whose messages say in plain words what is
// wanted (CLI11's PositiveNumber prints its upper bound, DBL_MAX, as a
// 300-digit number).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

namespace qat::apps {

// A number > 0 (strict) or >= 0.
inline CLI::Validator number_above_zero(bool strict) {
  const std::string want = strict ? "a number > 0" : "a number >= 0";
  return CLI::Validator(
      [strict, want](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok = !text.empty() && end && *end == '\0' && std::isfinite(v) && (strict ? v > 0 : v >= 0);
        return ok ? std::string() : "expected " + want + ", got '" + text + "'";
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}

inline const CLI::Validator kPositive = number_above_zero(true);
inline const CLI::Validator kNonNegative = number_above_zero(false);

}  // namespace qat::apps
