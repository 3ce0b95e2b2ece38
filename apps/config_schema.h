#pragma once
// The experiment config's keys, one table: each Field names a key path, how
// to read and check its value and how to write it back, so that loading, the
// unknown-key check, --set overrides and config_to_yaml() agree on the same
// set of keys. Internal to apps/config*.cpp.
#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "apps/config.h"
#include "apps/yaml_value.h"

namespace qat::apps::config_schema {

struct Field {
  std::string path;  // e.g. "train.lr"
  bool required = false;
  std::function<void(const YamlValue&, ExperimentConfig&)> read;
  std::function<void(YAML::Emitter&, const ExperimentConfig&)> write;
  // Whether the key applies to this config (null: always): a key that does
  // not is refused when given and left out of the resolved config, so that
  // configs of other models keep their text and hash.
  std::function<bool(const ExperimentConfig&)> applies = nullptr;
};

// In the order config_to_yaml() writes them.
const std::vector<Field>& fields();

// Key paths: leaves hold values, sections hold mappings of keys.
bool is_leaf(const std::string& path);
bool is_section(const std::string& path);
bool is_key(const std::string& path);
// The names of a section's keys ("" is the top level).
std::vector<std::string> keys_in(const std::string& section);
// For an unknown key: " (did you mean 'train.lr'?)", or the keys its section
// knows; empty when there is nothing useful to say.
std::string suggestion(const std::string& path);

std::vector<std::string> split_path(const std::string& path);
std::string parent_of(const std::string& path);

// Shortest text that reads back to the same double, always looking like a
// float (a '.' or an exponent) so that other YAML readers agree.
std::string format_double(double x);

}  // namespace qat::apps::config_schema
