#pragma once
// The kinds of config_schema::Field: a number with a range check, an
// integer with a lower bound, a boolean, a string, an enum, a list of numbers.
// `acc` is a generic lambda returning a reference to the member, used for both
// the mutable (read) and the const (write) config. Internal to config_schema.cpp.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "apps/config_schema.h"

namespace qat::apps::config_schema {

// A range check: empty when fine, else what was expected ("must be > 0").
using Check = std::function<std::string(double)>;

Check any();
Check at_least(double lo);
Check above(double lo);
Check in_range(double lo, double hi, bool closed);  // [lo, hi) or, closed, [lo, hi]
Check in_open_closed(double lo, double hi);         // (lo, hi]

// Fails naming `v` when `x` does not pass `check`.
void check_value(const YamlValue& v, double x, const Check& check);

template <class Acc>
Field real(std::string path, Acc acc, Check check) {
  return {std::move(path), false,
          [acc, check](const YamlValue& v, ExperimentConfig& c) {
            const double x = v.as<double>();
            check_value(v, x, check);
            acc(c) = x;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << format_double(acc(c)); }};
}

template <class Acc>
Field integer(std::string path, Acc acc, int64_t lo, bool required = false) {
  return {std::move(path), required,
          [acc, lo](const YamlValue& v, ExperimentConfig& c) {
            const int64_t x = v.as<int64_t>();
            if (x < lo) v.fail("must be >= " + std::to_string(lo) + ", got " + std::to_string(x));
            acc(c) = x;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << std::to_string(acc(c)); }};
}

// An integer in [lo, hi]: keys that size buffers, threads or queues, where a
// huge value would exhaust the machine or wrap a size computation.
template <class Acc>
Field integer_in(std::string path, Acc acc, int64_t lo, int64_t hi) {
  return {std::move(path), false,
          [acc, lo, hi](const YamlValue& v, ExperimentConfig& c) {
            const int64_t x = v.as<int64_t>();
            if (x < lo) v.fail("must be >= " + std::to_string(lo) + ", got " + std::to_string(x));
            if (x > hi) v.fail("must be <= " + std::to_string(hi) + ", got " + std::to_string(x));
            acc(c) = x;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << std::to_string(acc(c)); }};
}

template <class Acc>
Field boolean(std::string path, Acc acc) {
  return {std::move(path), false, [acc](const YamlValue& v, ExperimentConfig& c) { acc(c) = v.as<bool>(); },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << (acc(c) ? "true" : "false"); }};
}

// A string written back double-quoted (so that "123" or "yes" stay strings).
template <class Acc>
Field text(std::string path, Acc acc, bool required) {
  return {std::move(path), required,
          [acc](const YamlValue& v, ExperimentConfig& c) { acc(c) = v.as<std::string>(); },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << YAML::DoubleQuoted << acc(c); }};
}

// An enum with a name table (core/enum_names.h), written by name.
template <class Acc>
Field enumeration(std::string path, Acc acc) {
  using E = std::remove_cvref_t<decltype(acc(std::declval<ExperimentConfig&>()))>;
  auto write = [acc, key = path](YAML::Emitter& e, const ExperimentConfig& c) {
    const std::string name = enum_name(acc(c));
    QAT_CHECK(name != "?", "config: ", key, " holds an enum value without a name (", static_cast<int>(acc(c)), ")");
    e << name;
  };
  return {std::move(path), false, [acc](const YamlValue& v, ExperimentConfig& c) { acc(c) = v.as<E>(); },
          std::move(write)};
}

// `count` numbers, each passing `each`; `whole` checks the list as a whole
// (empty when fine).
template <class Acc>
Field real_list(std::string path, Acc acc, size_t count, Check each,
                std::function<std::string(const std::vector<double>&)> whole = nullptr) {
  return {std::move(path), false,
          [=](const YamlValue& v, ExperimentConfig& c) {
            std::vector<double> xs;
            for (const YamlValue& item : v.items(count, "numbers")) {
              xs.push_back(item.as<double>());
              check_value(item, xs.back(), each);
            }
            if (whole) {
              const std::string msg = whole(xs);
              if (!msg.empty()) v.fail(msg);
            }
            acc(c) = xs;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) {
            e << YAML::Flow << YAML::BeginSeq;
            for (double x : acc(c)) e << format_double(x);
            e << YAML::EndSeq;
          }};
}

}  // namespace qat::apps::config_schema
