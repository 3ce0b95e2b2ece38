#pragma once
// `--set key.path=value` overrides of the experiment config, applied on its
// YAML tree before validation. Internal to apps/config.cpp.
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

namespace qat::apps::config_schema {

// Applies `overrides` to `root` (a mapping) in order; a later one for the same
// key wins. Returns, by key path, the override as given ("train.lr=0.1"), so
// that an error about the value can say it came from the command line.
// Errors name `file` and the override.
std::map<std::string, std::string> apply_overrides(const std::string& file, YAML::Node& root,
                                                   const std::vector<std::string>& overrides);

}  // namespace qat::apps::config_schema
