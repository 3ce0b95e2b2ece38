#pragma once
// YamlValue: a node of a YAML file together with what an error about it must
// name: the file, the key path that leads to it (quant.weight.bits,
// layers[3].stride) and its line. Every reader of YAML in apps/ goes through
// it, so every error reads
//   "<file>, line <N>: <key.path>: expected <what>, got <what was found>"
// or, for a value that came from elsewhere than the file (given_by()),
//   "<file> (<note>): <key.path>: ...".
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace qat::apps {

class YamlValue {
 public:
  // `line`: 0-based as in YAML::Mark; negative when unknown.
  YamlValue(YAML::Node node, std::string file, std::string path, int line);

  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }
  // "file, line N", "file (note)" or "file".
  std::string where() const;
  // This value (and what is below it) reported as coming from `note`, e.g.
  // "--set train.lr=0.1", instead of from a line of the file.
  YamlValue given_by(std::string note) const;

  // "<where>: <path>: <msg>".
  [[noreturn]] void fail(const std::string& msg) const;
  // "<where>: unknown key '<path>'<hint>".
  [[noreturn]] void fail_unknown_key(const std::string& hint = "") const;
  // "<where>: missing required key '<path>.<key>'<hint>", said of the mapping that lacks it.
  [[noreturn]] void fail_missing_key(const std::string& key, const std::string& hint = "") const;
  // What the value holds, for "got ...": 'text', a list, a mapping or nothing.
  std::string describe() const;

  bool is_null() const { return !node_.IsDefined() || node_.IsNull(); }
  bool is_map() const { return node_.IsMap(); }

  // A scalar as bool, std::string, an integer or floating-point type, or an
  // enum with a name table (core/enum_names.h). Numbers and booleans must be
  // plain (quoted text is a string), integers in T's range, floating-point
  // values finite, booleans true or false, strings non-empty.
  template <class T>
  T as() const;

  // A mapping's entries in file order, each named "<path>.<key>" and placed
  // at its key's line; keys must be plain and unique. Null counts as empty.
  std::vector<std::pair<std::string, YamlValue>> entries() const;
  std::optional<YamlValue> find(const std::string& key) const;
  YamlValue get(const std::string& key) const;  // a required key
  void only_keys(std::initializer_list<const char*> known) const;
  // The same, the hint naming who takes the keys: " (<taker> takes: a, b)".
  void only_keys(const std::vector<std::string>& known, const std::string& taker) const;

  // A list's elements, each named "<path>[i]"; `expected` describes the list
  // in the error when it is not one.
  std::vector<YamlValue> items(const std::string& expected = "a list") const;
  // Exactly `count` elements: "expected a list of <count> <what>" otherwise.
  std::vector<YamlValue> items(size_t count, const std::string& what) const;

 private:
  YamlValue child(YAML::Node node, std::string path, int line) const;
  const std::string& plain_scalar(const std::string& expected) const;
  const std::string& scalar(const std::string& expected) const;
  bool as_bool() const;
  std::string as_string() const;
  template <class T>
  T as_number() const;
  template <class E>
  E as_enum() const;

  YAML::Node node_;
  std::string file_, path_, note_;
  int line_;
};

// Reads and parses a YAML file; a syntax error names the file and the line.
// A document that nests deeper than 64 levels or holds over 2 million
// values once its aliases are expanded (a cycle, aliases of aliases) is
// refused: no later walk of it can then recurse forever or blow up.
YamlValue load_yaml_file(const std::string& file);
// The same bound for a node parsed from other text (a --set value); where names it.
void check_yaml_bounded(const YAML::Node& node, const std::string& where);

template <class T>
T YamlValue::as() const {
  if constexpr (std::is_same_v<T, bool>) return as_bool();
  else if constexpr (std::is_same_v<T, std::string>) return as_string();
  else if constexpr (std::is_enum_v<T>) return as_enum<T>();
  else return as_number<T>();
}

template <class E>
E YamlValue::as_enum() const {
  const std::string expected = "one of " + enum_name_list<E>();
  if (auto e = enum_from_name<E>(scalar(expected))) return *e;
  fail("expected " + expected + ", got " + describe());
}

}  // namespace qat::apps
