#pragma once
// Command-line number checks whose messages say in plain words what is
// wanted (CLI11's PositiveNumber prints its upper bound, DBL_MAX, as a
// 300-digit number).
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace qat::apps {

// The experiment config: the first positional of every command that reads one.
inline void add_config(CLI::App* cmd, std::string& config, const std::string& help) {
  cmd->add_option("config", config, help)->required()->check(CLI::ExistingFile);
}

// --checkpoint FILE (required, existing).
inline void add_checkpoint(CLI::App* cmd, std::string& checkpoint, const std::string& help) {
  cmd->add_option("--checkpoint", checkpoint, help)->required()->check(CLI::ExistingPath);
}

// --set KEY=VALUE, repeatable: config overrides.
inline void add_overrides(CLI::App* cmd, std::vector<std::string>& overrides,
                          const std::string& help = "Override a config key (repeatable)") {
  cmd->add_option("--set", overrides, help);
}

// An option whose --help shows its default, its value checked by `check`.
template <class T>
CLI::Option* add_checked(CLI::App* cmd, const std::string& name, T& value, const std::string& help,
                         const CLI::Validator& check) {
  return cmd->add_option(name, value, help)->capture_default_str()->check(check);
}

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

// A count from 0 to `max`, digits only (no sign, fraction or exponent).
inline CLI::Validator count_up_to(uint64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        uint64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        const bool ok = !text.empty() && ec == std::errc() && at == end && v <= max;
        return ok ? std::string() : "expected a whole number from 0 to " + std::to_string(max) + ", got '" + text + "'";
      },
      "COUNT");
}

// CLI::Range lets NaN through (every comparison with it is false).
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok = !text.empty() && end && *end == '\0' && v >= lo && v <= hi;
        std::ostringstream want;
        want << "expected a number from " << lo << " to " << hi << ", got '" << text << "'";
        return ok ? std::string() : want.str();
      },
      "NUMBER");
}

}  // namespace qat::apps
