#include "apps/backend_config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include "core/error.h"

namespace qat::apps {

namespace fs = std::filesystem;
using quant::Pattern;

namespace {

struct Reader {
  std::string file;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& msg) const {
    QAT_FAIL(file, ", line ", n.Mark().line + 1, ": ", key, ": ", msg);
  }
  void only_keys(const YAML::Node& n, const std::string& where, const std::set<std::string>& known) const {
    if (!n.IsMap()) fail(n, where, "expected a mapping");
    for (auto it = n.begin(); it != n.end(); ++it)
      if (!known.count(it->first.Scalar()))
        fail(it->first, where.empty() ? it->first.Scalar() : where + "." + it->first.Scalar(), "unknown key");
  }
  YAML::Node need(const YAML::Node& n, const std::string& key, const std::string& path) const {
    if (!n[key]) QAT_FAIL(file, ", line ", n.Mark().line + 1, ": missing key '", path, "'");
    return n[key];
  }
  template <class T>
  T number(const YAML::Node& n, const std::string& key) const {
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, key, "expected a number, got '" + (n.IsScalar() ? n.Scalar() : std::string("a non-scalar")) + "'");
    }
  }
  std::optional<bool> choice(const YAML::Node& n, const std::string& key) const {
    const std::string v = n.Scalar();
    if (v == "auto") return std::nullopt;
    if (v == "true") return true;
    if (v == "false") return false;
    fail(n, key, "expected true, false or auto, got '" + v + "'");
  }
  quant::TensorRule rule(const YAML::Node& n, const std::string& key, bool weight) const {
    only_keys(n, key, weight ? std::set<std::string>{"dtype", "symmetric", "per_channel", "narrow_range", "formula", "bits"}
                             : std::set<std::string>{"dtype", "symmetric", "formula", "bits"});
    quant::TensorRule r;
    const YAML::Node dt = need(n, "dtype", key + ".dtype");
    if (dt.Scalar() == "int8") r.is_signed = true;
    else if (dt.Scalar() == "uint8") r.is_signed = false;
    else fail(dt, key + ".dtype", "expected int8 or uint8, got '" + dt.Scalar() + "'");
    if (n["symmetric"]) r.symmetric = choice(n["symmetric"], key + ".symmetric");
    if (n["per_channel"]) r.per_channel = choice(n["per_channel"], key + ".per_channel");
    if (n["narrow_range"]) {
      auto v = choice(n["narrow_range"], key + ".narrow_range");
      r.narrow_range = v.value_or(false);
      if (r.narrow_range && !r.is_signed) fail(n["narrow_range"], key + ".narrow_range", "needs dtype int8");
    }
    if (n["formula"]) {
      const std::string f = n["formula"].Scalar();
      if (f == "minmax") r.formula = quant::ScaleFormula::minmax;
      else if (f == "power_of_two") r.formula = quant::ScaleFormula::power_of_two;
      else if (f != "auto") fail(n["formula"], key + ".formula", "expected minmax, power_of_two or auto, got '" + f + "'");
    }
    if (n["bits"]) {
      const YAML::Node b = n["bits"];
      if (!b.IsSequence() || b.size() != 2) fail(b, key + ".bits", "expected [min, max]");
      r.min_bits = number<int>(b[0], key + ".bits");
      r.max_bits = number<int>(b[1], key + ".bits");
      if (r.min_bits < 2 || r.max_bits > 8 || r.min_bits > r.max_bits)
        fail(b, key + ".bits", "expected 2 <= min <= max <= 8");
    }
    return r;
  }
};

Pattern parse_pattern(const Reader& rd, const YAML::Node& n) {
  static const std::pair<const char*, Pattern> names[] = {
      {"conv", Pattern::conv},       {"conv+relu", Pattern::conv_relu},     {"conv+bn", Pattern::conv_bn},
      {"conv+bn+relu", Pattern::conv_bn_relu}, {"linear", Pattern::linear}, {"linear+relu", Pattern::linear_relu}};
  for (auto& [name, p] : names)
    if (n.Scalar() == name) return p;
  rd.fail(n, "patterns", "unknown pattern '" + n.Scalar() +
                             "' (known: conv, conv+relu, conv+bn, conv+bn+relu, linear, linear+relu)");
}

std::string find_backend(const std::string& name_or_path, const std::string& config_dir) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".yaml");
  if (is_path) {
    fs::path p(name_or_path);
    if (p.is_relative()) p = fs::path(config_dir) / p;
    QAT_CHECK(fs::exists(p), "quant.backend: no such backend file: ", p.string());
    return p.string();
  }
  const fs::path candidates[] = {fs::path(config_dir) / "backends", fs::path(config_dir) / ".." / "backends",
                                 fs::path(QAT_SOURCE_DIR) / "configs" / "backends"};
  std::string tried;
  for (const auto& dir : candidates) {
    fs::path p = dir / (name_or_path + ".yaml");
    if (fs::exists(p)) return p.lexically_normal().string();
    tried += (tried.empty() ? "" : ", ") + p.lexically_normal().string();
  }
  QAT_FAIL("quant.backend: unknown backend '", name_or_path, "' (looked for ", tried, ")");
}

}  // namespace

quant::Backend load_backend(const std::string& name_or_path, const std::string& config_dir) {
  const std::string file = find_backend(name_or_path, config_dir);
  Reader rd{file};
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::ParserException& e) {
    QAT_FAIL(file, ", line ", e.mark.line + 1, ": YAML syntax error: ", e.msg);
  } catch (const YAML::Exception& e) {
    QAT_FAIL(file, ": ", e.what());
  }
  rd.only_keys(root, "", {"name", "patterns", "weight", "activation", "min_scale"});
  quant::Backend b;
  b.name = rd.need(root, "name", "name").Scalar();
  const YAML::Node pats = rd.need(root, "patterns", "patterns");
  if (!pats.IsSequence()) rd.fail(pats, "patterns", "expected a list");
  for (const auto& p : pats) b.patterns.insert(parse_pattern(rd, p));
  b.weight = rd.rule(rd.need(root, "weight", "weight"), "weight", true);
  b.activation = rd.rule(rd.need(root, "activation", "activation"), "activation", false);
  if (root["min_scale"]) {
    b.min_scale = rd.number<float>(root["min_scale"], "min_scale");
    if (b.min_scale < 0) rd.fail(root["min_scale"], "min_scale", "must be >= 0");
  }
  return b;
}

}  // namespace qat::apps
