// Loading and validating the experiment config; its keys are the table in
// config_schema.cpp, --set overrides are config_overrides.cpp. Every error is
// a qat::Error of the form
//   "<file>, line <N>: <key.path>: <what was expected>, got <what was found>"
// or, for a value given on the command line,
//   "<file> (--set <key.path>=<value>): <key.path>: ..."
#include "apps/config.h"

#include <algorithm>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include "apps/config_overrides.h"
#include "apps/model_file.h"
#include "apps/config_schema.h"
#include "apps/yaml_value.h"
#include "core/error.h"
#include "models/models.h"

namespace qat::apps {
namespace {

namespace fs = std::filesystem;
using namespace config_schema;

using Values = std::map<std::string, YamlValue>;  // by key path

// Checks every mapping of the tree (keys known, plain and unique; sections
// are mappings) and collects its values, sections included, by key path.
// The --set texts that made the mapping `v` one layer's key at a time
// (quant.overrides.<layer>.<field>, where the file has no quant.overrides:
// a mapping with no place in the file), joined; empty otherwise. (Where the
// file has entries too, errors keep their file and line.)
std::string set_inside(const YamlValue& v, const std::map<std::string, std::string>& given) {
  if (!v.node().Mark().is_null() || !is_key(v.path()) || is_section(v.path())) return "";
  std::string texts;
  for (const auto& [p, text] : given)
    if (p.rfind(v.path() + ".", 0) == 0 && !is_key(p)) texts += (texts.empty() ? "--set " : ", --set ") + text;
  return texts;
}

void collect(const YamlValue& section, const std::map<std::string, std::string>& given, Values& out) {
  for (auto& [key, in_file] : section.entries()) {
    auto set = given.find(in_file.path());
    const std::string inside = set == given.end() ? set_inside(in_file, given) : "";
    const YamlValue v = set != given.end() ? in_file.given_by("--set " + set->second)
                        : inside.empty()   ? in_file
                                           : in_file.given_by(inside);
    if (!is_key(v.path())) v.fail_unknown_key(suggestion(v.path()));
    out.insert_or_assign(v.path(), v);
    if (is_section(v.path())) collect(v, given, out);
  }
}

void read_fields(const Values& values, const YamlValue& root, ExperimentConfig& cfg) {
  for (const Field& f : fields()) {
    if (auto it = values.find(f.path); it != values.end()) {
      f.read(it->second, cfg);
    } else if (f.required) {
      const std::string section = parent_of(f.path);
      auto sec = values.find(section);
      if (sec == values.end()) root.fail_missing_key(f.path, " (no '" + section + "' section)");
      sec->second.fail_missing_key(f.path.substr(section.size() + 1), " (in section '" + section + "')");
    }
  }
}

// The value at `key`, or an empty one naming the file when the key is absent.
YamlValue value_of(const Values& values, const std::string& file, const std::string& key) {
  auto it = values.find(key);
  return it != values.end() ? it->second : YamlValue(YAML::Node(), file, key, -1);
}

// quant.observer_off_epoch: 1 turns observers off before the first batch:
// the weight quantizers never see a weight and the whole first epoch would
// train on empty ranges (then the run stops on their infinite min/max). A
// calibration does not help: QAT from it takes the activations' scales and
// leaves the weight quantizers to observe the weights as they train
// (quant::start_from_calibration). Learned quantizers (LSQ) have no observers.
void check_observers_observe(const ExperimentConfig& cfg, const Values& values) {
  const QuantConfig& q = cfg.quant;
  if (!q.enabled || q.observer_off_epoch != 1) return;
  if (q.method == quant::QuantMethod::lsq || q.method == quant::QuantMethod::lsq_plus) return;
  value_of(values, cfg.source_path, "quant.observer_off_epoch")
      .fail(std::string("1 turns the observers off before they see any data, so the ") + quant::method_name(q.method) +
            " weight quantizers would never get a range (also from a calibration, whose weight quantizers observe "
            "the weights as they train): use 2 or later (0: never off)");
}

// model.name, model.file or model.onnx: exactly one.
void check_model_keys(const Values& values, const YamlValue& root) {
  std::vector<std::string> given;
  for (const char* k : {"model.name", "model.file", "model.onnx"})
    if (values.count(k)) given.push_back(k);
  if (given.size() > 1)
    values.at(given[1]).fail("give one of model.name (a built-in network), model.file (a model file) and "
                             "model.onnx (an ONNX model), not " + given[0] + " too");
  if (!given.empty()) return;
  auto model = values.find("model");
  if (model == values.end()) root.fail_missing_key("model.name", " (no 'model' section)");
  model->second.fail_missing_key("name", " (in section 'model'; or model.file, a model file, or model.onnx)");
}

void check_across_keys(const ExperimentConfig& cfg, const Values& values) {
  const std::string& file = cfg.source_path;
  for (const Field& f : fields())
    if (f.applies && !f.applies(cfg) && values.count(f.path))
      value_of(values, file, f.path).fail("does not apply to " +
                                                  (cfg.model.built_in() ? "model.name " + cfg.model.name
                                                   : cfg.model.file.empty() ? "an ONNX model (model.onnx)"
                                                                            : "a model file (model.file)"));
  if (!cfg.data.augment.random_resized_crop && cfg.data.resize < cfg.data.image_size) {
    const std::string why = " (the resized image is cropped to data.image_size; with data.augment.random_resized_crop "
                            "true data.resize may be smaller)";
    if (values.count("data.resize"))
      value_of(values, file, "data.resize")
          .fail("must be >= data.image_size (" + std::to_string(cfg.data.image_size) + "), got " +
                std::to_string(cfg.data.resize) + why);
    value_of(values, file, "data.image_size")
        .fail("must be <= data.resize (" + std::to_string(cfg.data.resize) + ", the default), got " +
              std::to_string(cfg.data.image_size) + why);
  }
  // (it failed at the first forward, after the run folder was made)
  if (const int64_t least = cfg.model.min_input_size(); cfg.data.image_size < least)
    value_of(values, file, "data.image_size")
        .fail("must be >= " + std::to_string(least) + " for model.name " + cfg.model.name +
              " (its convolutions and pools need that many pixels), got " + std::to_string(cfg.data.image_size));
  if (cfg.quant.integer_forward && !cfg.quant.enabled)
    value_of(values, file, "quant.integer_forward")
        .fail("the integer forward is that of a quantized model: it needs quant.enabled: true");
  if (cfg.quant.integer_forward && cfg.quant.int8_training.enabled)
    value_of(values, file, "quant.integer_forward")
        .fail("INT8 training's forward already runs on the integer GEMMs: drop quant.integer_forward, or set "
              "quant.int8_training.enabled: false for float gradients");
  if (cfg.quant.int8_training.enabled && !cfg.quant.enabled)
    value_of(values, file, "quant.int8_training.enabled")
        .fail("INT8 training runs on a quantized model: it needs quant.enabled: true");
  check_observers_observe(cfg, values);
  if (cfg.train.schedule == LrScheduleKind::multistep && cfg.train.milestones.empty())
    value_of(values, file, values.count("train.milestones") ? "train.milestones" : "train.schedule")
        .fail("the multistep schedule needs train.milestones (a non-empty list of epochs)");
}

// A data root: relative to `base`, made absolute so that a copy of the
// resolved config works from anywhere.
std::string resolve_dir(const YamlValue& v, const fs::path& base, DataPaths data_paths) {
  fs::path p(v.as<std::string>());
  if (p.is_relative()) p = base / p;
  p = fs::absolute(p).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  if (data_paths == DataPaths::as_recorded) return p.string();
  std::error_code ec;
  if (!fs::exists(p, ec)) v.fail("no such directory: " + p.string());
  if (!fs::is_directory(p, ec)) v.fail("not a directory: " + p.string());
  return p.string();
}

// output.dir stays relative to the current directory, normalised.
std::string normal_dir(const std::string& dir) {
  fs::path out = fs::path(dir).lexically_normal();
  if (!out.has_filename() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();
  return out.string();
}

}  // namespace

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                             DataPaths data_paths) {
  const YamlValue file = load_yaml_file(path);
  (void)file.entries();  // the top level is a mapping before --set writes into it
  YAML::Node tree = file.is_null() ? YAML::Node(YAML::NodeType::Map) : file.node();
  const auto given = apply_overrides(path, tree, overrides);
  const YamlValue root(tree, path, "", -1);
  Values values;
  collect(root, given, values);

  ExperimentConfig cfg;
  cfg.source_path = path;
  check_model_keys(values, root);
  read_fields(values, root, cfg);
  check_across_keys(cfg, values);
  if (!cfg.model.built_in()) dry_run_model(cfg.model, cfg.data.image_size);
  const fs::path base = fs::path(path).parent_path();
  cfg.data.train = resolve_dir(value_of(values, path, "data.train"), base, data_paths);
  cfg.data.val = resolve_dir(value_of(values, path, "data.val"), base, data_paths);
  cfg.output.dir = normal_dir(cfg.output.dir);
  return cfg;
}

namespace {

constexpr const char* kYamlHeader = "# qat experiment config (resolved: every key, defaults included)\n";

// Every field but those in `skip` as YAML, sections nested.
std::string fields_to_yaml(const ExperimentConfig& cfg, const std::vector<std::string_view>& skip) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  std::vector<std::string> open;  // the sections currently open
  for (const Field& f : fields()) {
    if (std::find(skip.begin(), skip.end(), f.path) != skip.end()) continue;
    if (f.applies && !f.applies(cfg)) continue;
    auto parts = split_path(f.path);
    std::vector<std::string> want(parts.begin(), parts.end() - 1);
    size_t common = 0;
    while (common < open.size() && common < want.size() && open[common] == want[common]) ++common;
    while (open.size() > common) {
      e << YAML::EndMap;
      open.pop_back();
    }
    while (open.size() < want.size()) {
      e << YAML::Key << want[open.size()] << YAML::Value << YAML::BeginMap;
      open.push_back(want[open.size()]);
    }
    e << YAML::Key << parts.back() << YAML::Value;
    f.write(e, cfg);
  }
  while (!open.empty()) {
    e << YAML::EndMap;
    open.pop_back();
  }
  e << YAML::EndMap;
  QAT_CHECK(e.good(), "config_to_yaml: YAML emitter error: ", e.GetLastError());
  return e.c_str();
}

}  // namespace

std::string config_to_yaml(const ExperimentConfig& cfg) {
  std::string header = kYamlHeader;
  if (!cfg.source_path.empty()) header += "# from " + cfg.source_path + "\n";
  return header + fields_to_yaml(cfg, {}) + "\n";
}

bool is_resolved_config(const std::string& path) {
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  return first + "\n" == kYamlHeader;
}

std::optional<bool> choice_value(Choice c) {
  if (c == Choice::auto_) return std::nullopt;
  return c == Choice::yes;
}

std::optional<quant::ScaleFormula> formula_value(FormulaChoice f) {
  switch (f) {
    case FormulaChoice::auto_: return std::nullopt;
    case FormulaChoice::minmax: return quant::ScaleFormula::minmax;
    case FormulaChoice::power_of_two: return quant::ScaleFormula::power_of_two;
    case FormulaChoice::amax_over_qmax: return quant::ScaleFormula::amax_over_qmax;
  }
  return std::nullopt;
}

quant::QConfig make_qconfig(const QuantConfig& q) {
  quant::QConfig c;
  c.method = q.method;
  c.ste = q.ste;
  c.averaging_constant = static_cast<float>(q.averaging_constant);
  c.weight_bits = static_cast<int>(q.weight.bits > 0 ? q.weight.bits : q.bits);
  c.activation_bits = static_cast<int>(q.activation.bits > 0 ? q.activation.bits : q.bits);
  c.weight_symmetric = choice_value(q.weight.symmetric);
  c.weight_per_channel = choice_value(q.weight.per_channel);
  c.activation_symmetric = choice_value(q.activation.symmetric);
  c.formula = formula_value(q.formula);
  c.overrides = q.overrides;
  return c;
}

std::string config_hash_data_apart(const ExperimentConfig& cfg) {
  ExperimentConfig c = cfg;
  c.data.train.clear();
  c.data.val.clear();
  return config_hash(c);
}

std::vector<std::pair<std::string, std::string>> config_section_hashes(const ExperimentConfig& cfg) {
  ExperimentConfig model, data, train, quant;
  model.model = cfg.model;
  data.data = cfg.data;
  data.data.workers = DataConfig{}.workers, data.data.prefetch = DataConfig{}.prefetch;
  data.data.cache = DataConfig{}.cache;
  train.train = cfg.train;
  quant.quant = cfg.quant;
  return {{"model", config_hash_data_apart(model)},
          {"data", config_hash_data_apart(data)},
          {"train", config_hash_data_apart(train)},
          {"quant", config_hash_data_apart(quant)}};
}

std::string config_hash(const ExperimentConfig& cfg) {
  ExperimentConfig c = cfg;
  c.output.dir.clear();
  c.train.threads = 0;  // how it runs, not what it computes
  c.source_path.clear();
  c.sweep.clear();
  // train.device and train.overlap_allreduce (how it runs, too) are left out
  // rather than reset: the text of runs recorded before the keys existed,
  // and so their hash, stays the same. quant.integer_forward changes the
  // forward's rounding, so it counts, but only when on (the same reason);
  // so does quant.bn_reestimation_batches, but only when not 0.
  std::vector<std::string_view> left_out{"train.device", "train.overlap_allreduce"};
  if (!c.quant.integer_forward) left_out.push_back("quant.integer_forward");
  if (c.quant.bn_reestimation_batches == 0) left_out.push_back("quant.bn_reestimation_batches");
  const std::string text = kYamlHeader + fields_to_yaml(c, left_out) + "\n";
  // FNV-1a, 64 bits.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace qat::apps
