#include "apps/backend_config.h"

#include <filesystem>

#include "apps/config.h"
#include "apps/yaml_value.h"
#include "core/error.h"

namespace qat::apps {

namespace fs = std::filesystem;
using quant::Pattern;

namespace {

quant::TensorRule read_rule(const YamlValue& v, bool weight) {
  if (weight) v.only_keys({"dtype", "symmetric", "per_channel", "narrow_range", "formula", "bits"});
  else v.only_keys({"dtype", "symmetric", "formula", "bits"});
  quant::TensorRule r;
  const YamlValue dtype = v.get("dtype");
  const std::string dt = dtype.as<std::string>();
  if (dt != "int8" && dt != "uint8") dtype.fail("expected int8 or uint8, got " + dtype.describe());
  r.is_signed = dt == "int8";
  if (auto s = v.find("symmetric")) r.symmetric = choice_value(s->as<Choice>());
  if (auto pc = v.find("per_channel")) r.per_channel = choice_value(pc->as<Choice>());
  if (auto nr = v.find("narrow_range")) {
    r.narrow_range = choice_value(nr->as<Choice>()).value_or(false);
    if (r.narrow_range && !r.is_signed) nr->fail("needs dtype int8");
  }
  if (auto f = v.find("formula")) r.formula = formula_value(f->as<FormulaChoice>());
  if (auto b = v.find("bits")) {
    const auto range = b->items(2, "integers [min, max]");
    r.min_bits = range[0].as<int>();
    r.max_bits = range[1].as<int>();
    if (r.min_bits < 2 || r.max_bits > 8 || r.min_bits > r.max_bits) b->fail("expected 2 <= min <= max <= 8");
  }
  return r;
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
  const YamlValue root = load_yaml_file(find_backend(name_or_path, config_dir));
  root.only_keys({"name", "patterns", "weight", "activation", "min_scale"});
  quant::Backend b;
  b.name = root.get("name").as<std::string>();
  for (const YamlValue& p : root.get("patterns").items()) b.patterns.insert(p.as<Pattern>());
  b.weight = read_rule(root.get("weight"), true);
  b.activation = read_rule(root.get("activation"), false);
  if (auto ms = root.find("min_scale")) {
    b.min_scale = ms->as<float>();
    if (b.min_scale < 0) ms->fail("must be >= 0");
  }
  return b;
}

quant::Backend configured_backend(const ExperimentConfig& cfg) {
  const std::string config_dir = std::filesystem::path(cfg.source_path).parent_path().string();
  return load_backend(cfg.quant.backend, config_dir.empty() ? "." : config_dir);
}

quant::PrepareReport prepare_as_configured(Module& model, const quant::Backend& backend, const quant::QConfig& qconfig,
                                           const ExperimentConfig& cfg) {
  try {
    return quant::prepare(model, backend, qconfig);
  } catch (const Error& e) {
    QAT_FAIL("config ", cfg.source_path, ": ", e.what());
  }
}

}  // namespace qat::apps
