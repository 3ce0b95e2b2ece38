#include "apps/config_schema.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <charconv>

#include "apps/config_field_kinds.h"
#include "apps/model_file.h"
#include "data/transforms.h"
#include "models/models.h"

namespace qat::apps::config_schema {

std::string format_double(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  else if (s.find('.') == std::string::npos && s.find('e') != std::string::npos) s.insert(s.find('e'), ".0");
  return s;
}

// ------------------------------------------------------------------- checks

Check any() { return [](double) { return std::string(); }; }
Check at_least(double lo) {
  return [lo](double x) { return x >= lo ? std::string() : "must be >= " + format_double(lo); };
}
Check above(double lo) {
  return [lo](double x) { return x > lo ? std::string() : "must be > " + format_double(lo); };
}
// Values the data pipeline holds as floats (the normalisation's mean and
// std): 1e308 or 1e-320 pass as doubles but become inf or 0 as floats.
Check float_magnitude(bool positive) {
  return [positive](double x) {
    if (positive && !(x >= FLT_MIN && x <= FLT_MAX))
      return std::string("must be a positive number a float holds (about 1.2e-38 to 3.4e+38)");
    if (!positive && !(std::fabs(x) <= FLT_MAX)) return std::string("must be a number a float holds (|x| up to about 3.4e+38)");
    return std::string();
  };
}
Check in_range(double lo, double hi, bool closed) {
  return [=](double x) {
    bool ok = x >= lo && (closed ? x <= hi : x < hi);
    return ok ? std::string()
              : "must be in [" + format_double(lo) + ", " + format_double(hi) + (closed ? "]" : ")");
  };
}
Check in_open_closed(double lo, double hi) {
  return [=](double x) {
    return x > lo && x <= hi ? std::string() : "must be in (" + format_double(lo) + ", " + format_double(hi) + "]";
  };
}

void check_value(const YamlValue& v, double x, const Check& check) {
  std::string msg = check(x);
  if (!msg.empty()) v.fail(msg + ", got " + format_double(x));
}

namespace {

std::string increasing_pair(const std::vector<double>& xs) {
  return xs[0] <= xs[1] ? std::string() : "expected [low, high] with low <= high, got [" + format_double(xs[0]) + ", " +
                                              format_double(xs[1]) + "]";
}

// ------------------------------------------------- keys with their own reader

Field model_name() {
  // (required unless model.file is given: check_across_keys)
  Field f{"model.name", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            std::string name = v.as<std::string>();
            auto names = model_names();
            if (std::find(names.begin(), names.end(), name) == names.end()) {
              std::string known;
              for (auto& n : names) known += (known.empty() ? "" : ", ") + n;
              v.fail("unknown model '" + name + "' (known: " + known + ")");
            }
            c.model.name = name;
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) { e << c.model.name; }};
  f.applies = [](const ExperimentConfig& c) { return c.model.built_in(); };
  return f;
}

// model.stem: only for the models that take one (model_takes_stem).
Field model_stem() {
  Field f = enumeration("model.stem", [](auto& c) -> auto& { return c.model.stem; });
  f.applies = [](const ExperimentConfig& c) { return c.model.takes_stem(); };
  return f;
}

// A model path: relative to the config's folder, recorded absolute.
std::string model_path(const YamlValue& v, const ExperimentConfig& c, const char* what) {
  std::filesystem::path p(v.as<std::string>());
  if (p.is_relative()) p = std::filesystem::path(c.source_path).parent_path() / p;
  p = std::filesystem::absolute(p).lexically_normal();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) v.fail(std::string("no such ") + what + ": " + p.string());
  return p.string();
}

// model.file: the model's name is the file's name:. Written only when
// given, so configs of built-in models keep their text and hash.
Field model_file() {
  Field f{"model.file", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            c.model.file = model_path(v, c, "model file");
            c.model.name = model_file_name(c.model.file);
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) { e << YAML::DoubleQuoted << c.model.file; }};
  f.applies = [](const ExperimentConfig& c) { return !c.model.file.empty(); };
  return f;
}

// model.onnx: the model is named by the file's name without .onnx.
Field model_onnx() {
  Field f{"model.onnx", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            c.model.onnx = model_path(v, c, "ONNX file");
            c.model.name = std::filesystem::path(c.model.onnx).stem().string();
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) { e << YAML::DoubleQuoted << c.model.onnx; }};
  f.applies = [](const ExperimentConfig& c) { return !c.model.onnx.empty(); };
  return f;
}

Field milestones() {
  return {"train.milestones", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            std::vector<int64_t> ms;
            for (const YamlValue& item : v.items("a list of epochs (integers)")) {
              int64_t m = item.as<int64_t>();
              if (m < 1) item.fail("must be >= 1, got " + std::to_string(m));
              if (!ms.empty() && m <= ms.back())
                item.fail("milestones must be strictly increasing, got " + std::to_string(m) + " after " +
                          std::to_string(ms.back()));
              ms.push_back(m);
            }
            c.train.milestones = ms;
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) {
            e << YAML::Flow << YAML::BeginSeq;
            for (int64_t m : c.train.milestones) e << std::to_string(m);
            e << YAML::EndSeq;
          }};
}

Field keep_float() {
  return {"quant.int8_training.keep_float", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            c.quant.int8_training.keep_float.clear();
            for (const YamlValue& item : v.items("a list of layer names"))
              c.quant.int8_training.keep_float.push_back(item.as<std::string>());
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) {
            e << YAML::Flow << YAML::BeginSeq;
            for (const std::string& l : c.quant.int8_training.keep_float) e << YAML::DoubleQuoted << l;
            e << YAML::EndSeq;
          }};
}

Field seed() {
  return {"train.seed", false, [](const YamlValue& v, ExperimentConfig& c) { c.train.seed = v.as<uint64_t>(); },
          [](YAML::Emitter& e, const ExperimentConfig& c) { e << std::to_string(c.train.seed); }};
}

// A quantizer's bit width: 2..8 (qat's integer kernels hold int8), or, where
// `inherit` says so, 0 for "quant.bits".
template <class Acc>
Field bit_width(std::string path, Acc acc, bool inherit) {
  return {std::move(path), false,
          [acc, inherit](const YamlValue& v, ExperimentConfig& c) {
            const int64_t x = v.as<int64_t>();
            if (!(inherit && x == 0) && (x < 2 || x > 8))
              v.fail(std::string("bits must be ") + (inherit ? "0 (take quant.bits) or " : "") + "in 2..8, got " +
                     std::to_string(x));
            acc(c) = x;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << std::to_string(acc(c)); }};
}

// quant.overrides: {module.name: {weight_bits: N, activation_bits: M}, ...}
int override_bits(const YamlValue& layer, const char* key) {
  auto v = layer.find(key);
  if (!v) return 0;
  const int bits = v->as<int>();
  if (bits < 2 || bits > 8) v->fail("bits must be in 2..8, got " + std::to_string(bits));
  return bits;
}

Field quant_overrides() {
  return {"quant.overrides", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            c.quant.overrides.clear();
            if (!v.is_null() && !v.is_map())
              v.fail("expected a mapping of module names to {weight_bits, activation_bits}, got " + v.describe());
            for (auto& [layer, lv] : v.entries()) {
              if (!lv.is_map()) lv.fail("expected {weight_bits: N, activation_bits: M}, got " + lv.describe());
              lv.only_keys({"weight_bits", "activation_bits"});
              c.quant.overrides[layer] = {override_bits(lv, "weight_bits"), override_bits(lv, "activation_bits")};
            }
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) {
            e << YAML::BeginMap;
            for (auto& [layer, b] : c.quant.overrides) {
              e << YAML::Key << layer << YAML::Value << YAML::Flow << YAML::BeginMap;
              if (b.weight_bits) e << YAML::Key << "weight_bits" << YAML::Value << b.weight_bits;
              if (b.activation_bits) e << YAML::Key << "activation_bits" << YAML::Value << b.activation_bits;
              e << YAML::EndMap;
            }
            e << YAML::EndMap;
          }};
}

Field init_from() {
  return {"quant.init_from", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            const bool empty = v.is_null() || (v.node().IsScalar() && v.node().Scalar().empty());
            c.quant.init_from = empty ? std::string() : v.as<std::string>();
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) { e << YAML::DoubleQuoted << c.quant.init_from; }};
}

// sweep: {key.path: [v1, v2, ...], ...}; the keys must be config keys.
Field sweep() {
  return {"sweep", false,
          [](const YamlValue& v, ExperimentConfig& c) {
            c.sweep.clear();
            if (!v.is_null() && !v.is_map())
              v.fail("expected a mapping of config keys to lists of values, got " + v.describe());
            for (auto& [key, kv] : v.entries()) {
              if (!is_leaf(key) || key == "sweep") kv.fail("'" + key + "' is not a config key that can be swept");
              std::vector<std::string> values;
              for (const YamlValue& item : kv.items("a non-empty list of values")) {
                YAML::Emitter e;
                e << YAML::Flow << item.node();
                values.push_back(e.c_str());
              }
              if (values.empty()) kv.fail("expected a non-empty list of values");
              c.sweep.emplace_back(key, values);
            }
          },
          [](YAML::Emitter& e, const ExperimentConfig& c) {
            e << YAML::BeginMap;
            for (auto& [key, values] : c.sweep) {
              e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
              for (auto& v : values) e << YAML::Load(v);
              e << YAML::EndSeq;
            }
            e << YAML::EndMap;
          }};
}

// Upper bounds of the keys that size threads, queues and buffers.
constexpr int64_t kMaxClasses = int64_t{1} << 20;
constexpr int64_t kMaxWorkers = 256;
constexpr int64_t kMaxPrefetch = 1024;
constexpr int64_t kMaxBatch = int64_t{1} << 16;

#define QAT_CFG(member) [](auto& c) -> auto& { return c.member; }

std::vector<Field> model_and_data_fields() {
  return {
      model_name(),
      model_file(),
      model_onnx(),
      integer_in("model.num_classes", QAT_CFG(model.num_classes), 1, kMaxClasses),
      model_stem(),
      text("data.train", QAT_CFG(data.train), true),
      text("data.val", QAT_CFG(data.val), true),
      integer_in("data.image_size", QAT_CFG(data.image_size), 32, data::kMaxImageSide),
      integer_in("data.resize", QAT_CFG(data.resize), 1, data::kMaxImageSide),
      boolean("data.augment.random_crop", QAT_CFG(data.augment.random_crop)),
      integer_in("data.augment.padding", QAT_CFG(data.augment.padding), 0, data::kMaxImageSide),
      boolean("data.augment.random_resized_crop", QAT_CFG(data.augment.random_resized_crop)),
      real_list("data.augment.scale", QAT_CFG(data.augment.scale), 2, in_open_closed(0, 1), increasing_pair),
      real_list("data.augment.ratio", QAT_CFG(data.augment.ratio), 2, above(0), increasing_pair),
      boolean("data.augment.hflip", QAT_CFG(data.augment.hflip)),
      real_list("data.mean", QAT_CFG(data.mean), 3, float_magnitude(false)),
      real_list("data.std", QAT_CFG(data.std), 3, float_magnitude(true)),
      integer_in("data.workers", QAT_CFG(data.workers), 0, kMaxWorkers),
      integer_in("data.prefetch", QAT_CFG(data.prefetch), 1, kMaxPrefetch),
      boolean("data.cache", QAT_CFG(data.cache)),
      enumeration("data.on_bad_image", QAT_CFG(data.on_bad_image)),
      integer_in("data.max_image_pixels", QAT_CFG(data.max_image_pixels), 1, int64_t{1} << 31),
      real("data.max_aspect_ratio", QAT_CFG(data.max_aspect_ratio), at_least(1)),
  };
}

std::vector<Field> train_fields() {
  return {
      integer("train.epochs", QAT_CFG(train.epochs), 1, /*required=*/true),
      integer_in("train.batch_size", QAT_CFG(train.batch_size), 1, kMaxBatch),
      enumeration("train.optimizer", QAT_CFG(train.optimizer)),
      real("train.lr", QAT_CFG(train.lr), above(0)),
      real("train.momentum", QAT_CFG(train.momentum), in_range(0, 1, false)),
      boolean("train.nesterov", QAT_CFG(train.nesterov)),
      boolean("train.sync_bn", QAT_CFG(train.sync_bn)),
      enumeration("train.overlap_allreduce", QAT_CFG(train.overlap_allreduce)),
      real("train.weight_decay", QAT_CFG(train.weight_decay), at_least(0)),
      boolean("train.no_decay_bn_bias", QAT_CFG(train.no_decay_bn_bias)),
      real_list("train.betas", QAT_CFG(train.betas), 2, in_range(0, 1, false)),
      real("train.eps", QAT_CFG(train.eps), above(0)),
      enumeration("train.schedule", QAT_CFG(train.schedule)),
      integer("train.step_size", QAT_CFG(train.step_size), 1),
      milestones(),
      real("train.gamma", QAT_CFG(train.gamma), above(0)),
      real("train.min_lr_factor", QAT_CFG(train.min_lr_factor), in_range(0, 1, true)),
      real("train.warmup_epochs", QAT_CFG(train.warmup_epochs), at_least(0)),
      real("train.warmup_start_factor", QAT_CFG(train.warmup_start_factor), in_open_closed(0, 1)),
      real("train.label_smoothing", QAT_CFG(train.label_smoothing), in_range(0, 1, false)),
      seed(),
      integer_in("train.threads", QAT_CFG(train.threads), 0, kMaxThreads),
      enumeration("train.device", QAT_CFG(train.device)),
      integer("train.log_every", QAT_CFG(train.log_every), 1),
      integer("train.max_steps_per_epoch", QAT_CFG(train.max_steps_per_epoch), 0),
  };
}

std::vector<Field> quant_and_output_fields() {
  return {
      boolean("quant.enabled", QAT_CFG(quant.enabled)),
      text("quant.backend", QAT_CFG(quant.backend), false),
      enumeration("quant.method", QAT_CFG(quant.method)),
      enumeration("quant.ste", QAT_CFG(quant.ste)),
      bit_width("quant.bits", QAT_CFG(quant.bits), false),
      enumeration("quant.formula", QAT_CFG(quant.formula)),
      bit_width("quant.weight.bits", QAT_CFG(quant.weight.bits), true),
      enumeration("quant.weight.symmetric", QAT_CFG(quant.weight.symmetric)),
      enumeration("quant.weight.per_channel", QAT_CFG(quant.weight.per_channel)),
      bit_width("quant.activation.bits", QAT_CFG(quant.activation.bits), true),
      enumeration("quant.activation.symmetric", QAT_CFG(quant.activation.symmetric)),
      real("quant.averaging_constant", QAT_CFG(quant.averaging_constant), in_open_closed(0, 1)),
      integer("quant.freeze_bn_epoch", QAT_CFG(quant.freeze_bn_epoch), 0),
      integer("quant.observer_off_epoch", QAT_CFG(quant.observer_off_epoch), 0),
      integer("quant.bn_reestimation_batches", QAT_CFG(quant.bn_reestimation_batches), 0),
      quant_overrides(),
      init_from(),
      boolean("quant.integer_forward", QAT_CFG(quant.integer_forward)),
      boolean("quant.int8_training.enabled", QAT_CFG(quant.int8_training.enabled)),
      integer_in("quant.int8_training.gradient_bits", QAT_CFG(quant.int8_training.grad.bits), 2, 8),
      enumeration("quant.int8_training.rounding", QAT_CFG(quant.int8_training.grad.rounding)),
      enumeration("quant.int8_training.clipping", QAT_CFG(quant.int8_training.grad.clipping)),
      boolean("quant.int8_training.lr_scaling.enabled", QAT_CFG(quant.int8_training.grad.lr_scaling)),
      real("quant.int8_training.lr_scaling.alpha", QAT_CFG(quant.int8_training.grad.alpha), at_least(0)),
      real("quant.int8_training.lr_scaling.beta", QAT_CFG(quant.int8_training.grad.beta), in_open_closed(0, 1)),
      integer_in("quant.int8_training.period", QAT_CFG(quant.int8_training.grad.period), 1, int64_t{1} << 30),
      keep_float(),
      text("output.dir", QAT_CFG(output.dir), true),
      sweep(),
  };
}

#undef QAT_CFG

}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> all = [] {
    std::vector<Field> f;
    for (auto part : {model_and_data_fields(), train_fields(), quant_and_output_fields()})
      f.insert(f.end(), part.begin(), part.end());
    return f;
  }();
  return all;
}

}  // namespace qat::apps::config_schema
