#include "apps/config_overrides.h"

#include <optional>
#include <utility>

#include "apps/config_schema.h"
#include "apps/yaml_value.h"
#include "core/error.h"

namespace qat::apps::config_schema {
namespace {

std::string trim(std::string s) {
  const char* ws = " \t";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

struct Override {
  std::string text;  // as given, "key.path=value"
  std::string path;
  YAML::Node value;
};

// An error about `path` names the file and the override.
YamlValue given_by(const Override& o, const std::string& file, const std::string& path, YAML::Node node = {}) {
  return YamlValue(node, file, path, -1).given_by("--set " + o.text);
}

// "quant.overrides.<layer>.<field>": one layer's override, set as in the
// file's mapping (the layer's name may hold dots: features.0.0); the
// layer's name and the field, or nothing for any other path.
std::optional<std::pair<std::string, std::string>> layer_override(const std::string& path) {
  const std::string head = "quant.overrides.";
  const size_t dot = path.rfind('.');
  if (path.rfind(head, 0) != 0 || dot <= head.size()) return std::nullopt;
  const std::string field = path.substr(dot + 1);
  if (field != "weight_bits" && field != "activation_bits") return std::nullopt;
  return std::pair{path.substr(head.size(), dot - head.size()), field};
}

Override parse_override(const std::string& file, const std::string& text) {
  const auto eq = text.find('=');
  QAT_CHECK(eq != std::string::npos, file, ": --set ", text, ": expected key.path=value (e.g. train.lr=0.1)");
  Override o{text, trim(text.substr(0, eq)), {}};
  QAT_CHECK(!o.path.empty(), file, ": --set ", text, ": missing key before '='");
  const YamlValue at = given_by(o, file, o.path);
  const bool layer = layer_override(o.path).has_value();
  if (!layer && !is_key(o.path)) at.fail_unknown_key(suggestion(o.path));
  if (!layer && is_section(o.path))
    at.fail("is a section; set its keys one at a time (e.g. " + o.path + "." + keys_in(o.path).front() + "=...)");
  try {
    o.value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    at.fail("the value is not valid YAML: " + e.msg);
  }
  check_yaml_bounded(o.value, file + " (--set " + o.path + ")");
  return o;
}

// The mapping `key` of `parent` (at `path`), created when absent or empty.
YAML::Node section(YAML::Node& parent, const std::string& key, const std::string& path, const Override& o,
                   const std::string& file) {
  YAML::Node child;
  for (auto it = parent.begin(); it != parent.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) child.reset(it->second);
  if (!child.IsDefined() || child.IsNull()) {
    parent[key] = YAML::Node(YAML::NodeType::Map);
    child.reset(parent[key]);
  } else if (!child.IsMap()) {
    const YamlValue v = given_by(o, file, path, child);
    v.fail("expected a mapping (a section) in the file, got " + v.describe());
  }
  return child;
}

void apply(const std::string& file, YAML::Node& root, const Override& o) {
  const auto layer = layer_override(o.path);
  const auto parts = layer ? std::vector<std::string>{"quant", "overrides", layer->first, layer->second}
                           : split_path(o.path);
  YAML::Node cur;
  cur.reset(root);
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (prefix.empty() ? "" : ".") + parts[i];
    YAML::Node child = section(cur, parts[i], prefix, o, file);
    cur.reset(child);
  }
  cur[parts.back()] = o.value;
}

}  // namespace

std::map<std::string, std::string> apply_overrides(const std::string& file, YAML::Node& root,
                                                   const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> given;
  for (const std::string& text : overrides) {
    const Override o = parse_override(file, text);
    apply(file, root, o);
    given[o.path] = text;
  }
  return given;
}

}  // namespace qat::apps::config_schema
