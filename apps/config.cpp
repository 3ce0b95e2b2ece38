// ExperimentConfig <-> YAML. The schema is one table (kFields below): each
// entry names a key path, how to read and check its value and how to write it
// back, so loading, the unknown-key check, --set overrides and
// config_to_yaml() all agree on the same set of keys.
//
// Every error is a qat::Error of the form
//   "<file>, line <N>: <key.path>: <what was expected>, got <what was found>"
// or, for a value given on the command line,
//   "<file> (--set <key.path>=<value>): <key.path>: ..."
#include "apps/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include "core/error.h"
#include "models/models.h"

namespace qat::apps {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- locations

// Where values come from: the file, and which key paths were set by --set.
struct Source {
  std::string file;
  std::map<std::string, std::string> overrides;  // key path -> "key=value" as given

  // "file, line N" or "file (--set a.b=v)" for `path` whose key sits at `line`
  // (0-based as in YAML::Mark; negative: unknown).
  std::string where(const std::string& path, int line) const {
    if (auto it = overrides.find(path); it != overrides.end()) return file + " (--set " + it->second + ")";
    if (line >= 0) return file + ", line " + std::to_string(line + 1);
    return file;
  }
};

// A value found in the tree, with everything an error message needs.
struct Value {
  std::string path;   // full key path, e.g. "train.lr"
  YAML::Node node;    // the value
  std::string where;  // "file, line N"
};

[[noreturn]] void fail_at(const Value& v, const std::string& msg) { QAT_FAIL(v.where, ": ", v.path, ": ", msg); }

// What a node holds, for "got ..." in messages.
std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return "nothing (empty value)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: break;
  }
  return "'" + n.Scalar() + "'";
}

// ------------------------------------------------------------ number format

// Shortest text that reads back to the same double, always looking like a
// float (a '.' or an exponent) so that other YAML readers agree.
std::string format_double(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  else if (s.find('.') == std::string::npos && s.find('e') != std::string::npos) s.insert(s.find('e'), ".0");
  return s;
}

// ------------------------------------------------------------ scalar parsing

// A plain (unquoted) scalar: quoted text is a string, never a number or bool.
const std::string& plain_scalar(const Value& v, const char* expected) {
  if (!v.node.IsScalar()) fail_at(v, std::string("expected ") + expected + ", got " + describe(v.node));
  if (v.node.Tag() == "!") fail_at(v, std::string("expected ") + expected + ", got the quoted string " + describe(v.node));
  return v.node.Scalar();
}

double read_double(const Value& v) {
  const std::string& s = plain_scalar(v, "a number");
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  double x = 0;
  auto r = std::from_chars(b, e, x);
  if (r.ec != std::errc() || r.ptr != e || b == e) fail_at(v, "expected a number, got " + describe(v.node));
  if (!std::isfinite(x)) fail_at(v, "expected a finite number, got " + describe(v.node));
  return x;
}

int64_t read_int(const Value& v) {
  const std::string& s = plain_scalar(v, "an integer");
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  int64_t x = 0;
  auto r = std::from_chars(b, e, x);
  if (r.ec == std::errc::result_out_of_range) fail_at(v, "integer out of range: " + describe(v.node));
  if (r.ec != std::errc() || r.ptr != e || b == e) fail_at(v, "expected an integer, got " + describe(v.node));
  return x;
}

bool read_bool(const Value& v) {
  const std::string& s = plain_scalar(v, "true or false");
  if (s == "true") return true;
  if (s == "false") return false;
  fail_at(v, "expected true or false, got " + describe(v.node));
}

std::string read_string(const Value& v) {
  if (!v.node.IsScalar()) fail_at(v, "expected a string, got " + describe(v.node));
  if (v.node.Scalar().empty()) fail_at(v, "expected a non-empty string, got ''");
  return v.node.Scalar();
}

// The elements of a list, each as a Value named "path[i]".
std::vector<Value> read_list(const Value& v, const char* expected) {
  if (!v.node.IsSequence()) fail_at(v, std::string("expected ") + expected + ", got " + describe(v.node));
  std::vector<Value> out;
  for (size_t i = 0; i < v.node.size(); ++i)
    out.push_back({v.path + "[" + std::to_string(i) + "]", v.node[i], v.where});
  return out;
}

// ------------------------------------------------------------------- checks

// A range check: empty string when fine, else what was expected ("must be > 0").
using Check = std::function<std::string(double)>;

Check any() { return [](double) { return std::string(); }; }
Check at_least(double lo) {
  return [lo](double x) { return x >= lo ? std::string() : "must be >= " + format_double(lo); };
}
Check above(double lo) {
  return [lo](double x) { return x > lo ? std::string() : "must be > " + format_double(lo); };
}
// [lo, hi) or [lo, hi] when `closed`.
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

void check_value(const Value& v, double x, const Check& check) {
  std::string msg = check(x);
  if (!msg.empty()) fail_at(v, msg + ", got " + format_double(x));
}

// -------------------------------------------------------------- the schema

struct Field {
  std::string path;
  bool required = false;
  std::function<void(const Value&, ExperimentConfig&)> read;
  std::function<void(YAML::Emitter&, const ExperimentConfig&)> write;
};

// `acc` is a generic lambda returning a reference to the member, used for
// both the mutable (read) and const (write) config.
template <class Acc>
Field real(std::string path, Acc acc, Check check) {
  return {std::move(path), false,
          [acc, check](const Value& v, ExperimentConfig& c) {
            double x = read_double(v);
            check_value(v, x, check);
            acc(c) = x;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << format_double(acc(c)); }};
}

template <class Acc>
Field integer(std::string path, Acc acc, int64_t lo, bool required = false) {
  return {std::move(path), required,
          [acc, lo](const Value& v, ExperimentConfig& c) {
            int64_t x = read_int(v);
            if (x < lo) fail_at(v, "must be >= " + std::to_string(lo) + ", got " + std::to_string(x));
            acc(c) = x;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << std::to_string(acc(c)); }};
}

template <class Acc>
Field boolean(std::string path, Acc acc) {
  return {std::move(path), false, [acc](const Value& v, ExperimentConfig& c) { acc(c) = read_bool(v); },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << (acc(c) ? "true" : "false"); }};
}

// A string written back double-quoted (so that "123" or "yes" stay strings).
template <class Acc>
Field text(std::string path, Acc acc, bool required) {
  return {std::move(path), required, [acc](const Value& v, ExperimentConfig& c) { acc(c) = read_string(v); },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) { e << YAML::DoubleQuoted << acc(c); }};
}

template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E, size_t N, class Acc>
Field enumeration(std::string path, Acc acc, const EnumName<E> (&names)[N]) {
  std::vector<EnumName<E>> table(names, names + N);
  return {std::move(path), false,
          [acc, table](const Value& v, ExperimentConfig& c) {
            std::string known;
            for (auto& n : table) known += (known.empty() ? "" : ", ") + std::string(n.name);
            if (!v.node.IsScalar()) fail_at(v, "expected one of " + known + ", got " + describe(v.node));
            for (auto& n : table)
              if (v.node.Scalar() == n.name) {
                acc(c) = n.value;
                return;
              }
            fail_at(v, "expected one of " + known + ", got " + describe(v.node));
          },
          [acc, table](YAML::Emitter& e, const ExperimentConfig& c) {
            for (auto& n : table)
              if (acc(c) == n.value) {
                e << n.name;
                return;
              }
            QAT_FAIL("config_to_yaml: invalid enum value (", static_cast<int>(acc(c)), ")");
          }};
}

// A list of numbers: `count` elements (0: any), each passing `each`; `whole`
// checks the list as a whole (empty string when fine).
template <class Acc>
Field real_list(std::string path, Acc acc, size_t count, Check each,
                std::function<std::string(const std::vector<double>&)> whole = nullptr) {
  return {std::move(path), false,
          [=](const Value& v, ExperimentConfig& c) {
            std::string expected = count ? "a list of " + std::to_string(count) + " numbers" : "a list of numbers";
            auto items = read_list(v, expected.c_str());
            if (count && items.size() != count)
              fail_at(v, "expected " + expected + ", got " + std::to_string(items.size()) + " element(s)");
            std::vector<double> xs;
            for (auto& item : items) {
              double x = read_double(item);
              check_value(item, x, each);
              xs.push_back(x);
            }
            if (whole) {
              std::string msg = whole(xs);
              if (!msg.empty()) fail_at(v, msg);
            }
            acc(c) = xs;
          },
          [acc](YAML::Emitter& e, const ExperimentConfig& c) {
            e << YAML::Flow << YAML::BeginSeq;
            for (double x : acc(c)) e << format_double(x);
            e << YAML::EndSeq;
          }};
}

std::string increasing_pair(const std::vector<double>& xs) {
  return xs[0] <= xs[1] ? std::string() : "expected [low, high] with low <= high, got [" + format_double(xs[0]) + ", " +
                                              format_double(xs[1]) + "]";
}

const EnumName<OptimizerKind> kOptimizers[] = {{OptimizerKind::sgd, "sgd"}, {OptimizerKind::adamw, "adamw"}};
const EnumName<ScheduleKind> kSchedules[] = {{ScheduleKind::constant, "constant"},
                                             {ScheduleKind::step, "step"},
                                             {ScheduleKind::multistep, "multistep"},
                                             {ScheduleKind::cosine, "cosine"}};
const EnumName<quant::QuantMethod> kMethods[] = {{quant::QuantMethod::minmax, "minmax"},
                                                  {quant::QuantMethod::moving_average, "moving_average"},
                                                  {quant::QuantMethod::lsq, "lsq"},
                                                  {quant::QuantMethod::lsq_plus, "lsq_plus"}};
const EnumName<quant::SteKind> kSte[] = {{quant::SteKind::clipped, "clipped"}, {quant::SteKind::plain, "plain"}};
const EnumName<Choice> kChoice[] = {{Choice::auto_, "auto"}, {Choice::yes, "true"}, {Choice::no, "false"}};
const EnumName<FormulaChoice> kFormula[] = {{FormulaChoice::auto_, "auto"},
                                            {FormulaChoice::minmax, "minmax"},
                                            {FormulaChoice::power_of_two, "power_of_two"}};
const EnumName<BadImagePolicy> kBadImage[] = {{BadImagePolicy::error, "error"}, {BadImagePolicy::skip, "skip"}};

const std::vector<Field>& schema();

// quant.overrides: {module.name: {weight_bits: N, activation_bits: M}, ...}
void read_overrides(const Value& v, ExperimentConfig& c) {
  c.quant.overrides.clear();
  if (v.node.IsNull()) return;
  if (!v.node.IsMap()) fail_at(v, "expected a mapping of module names to {weight_bits, activation_bits}, got " + describe(v.node));
  for (auto it = v.node.begin(); it != v.node.end(); ++it) {
    const std::string layer = it->first.Scalar();
    Value lv{v.path + "." + layer, it->second, v.where};
    if (!it->second.IsMap()) fail_at(lv, "expected {weight_bits: N, activation_bits: M}, got " + describe(it->second));
    quant::LayerBits bits;
    for (auto jt = it->second.begin(); jt != it->second.end(); ++jt) {
      const std::string key = jt->first.Scalar();
      Value kv{lv.path + "." + key, jt->second, v.where};
      const int64_t b = read_int(kv);
      if (b < 2 || b > 8) fail_at(kv, "bits must be in 2..8, got " + std::to_string(b));
      if (key == "weight_bits") bits.weight_bits = static_cast<int>(b);
      else if (key == "activation_bits") bits.activation_bits = static_cast<int>(b);
      else fail_at(kv, "unknown key '" + key + "' (known: weight_bits, activation_bits)");
    }
    c.quant.overrides[layer] = bits;
  }
}

void write_overrides(YAML::Emitter& e, const ExperimentConfig& c) {
  e << YAML::BeginMap;
  for (auto& [layer, b] : c.quant.overrides) {
    e << YAML::Key << layer << YAML::Value << YAML::Flow << YAML::BeginMap;
    if (b.weight_bits) e << YAML::Key << "weight_bits" << YAML::Value << b.weight_bits;
    if (b.activation_bits) e << YAML::Key << "activation_bits" << YAML::Value << b.activation_bits;
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
}

// sweep: {key.path: [v1, v2, ...], ...}; the keys must be config keys.
void read_sweep(const Value& v, ExperimentConfig& c) {
  c.sweep.clear();
  if (v.node.IsNull()) return;
  if (!v.node.IsMap()) fail_at(v, "expected a mapping of config keys to lists of values, got " + describe(v.node));
  for (auto it = v.node.begin(); it != v.node.end(); ++it) {
    const std::string key = it->first.Scalar();
    Value kv{"sweep." + key, it->second, v.where};
    bool known = false;
    for (auto& f : schema()) known = known || (f.path == key && key != "sweep");
    if (!known) fail_at(kv, "'" + key + "' is not a config key that can be swept");
    if (!it->second.IsSequence() || it->second.size() == 0) fail_at(kv, "expected a non-empty list of values");
    std::vector<std::string> values;
    for (auto jt = it->second.begin(); jt != it->second.end(); ++jt) {
      YAML::Emitter e;
      e << YAML::Flow << *jt;
      values.push_back(e.c_str());
    }
    c.sweep.emplace_back(key, values);
  }
}

void write_sweep(YAML::Emitter& e, const ExperimentConfig& c) {
  e << YAML::BeginMap;
  for (auto& [key, values] : c.sweep) {
    e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (auto& v : values) e << YAML::Load(v);
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;
}

#define QAT_CFG(member) [](auto& c) -> auto& { return c.member; }

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = [] {
    std::vector<Field> f;
    // model
    f.push_back({"model.name", true,
                 [](const Value& v, ExperimentConfig& c) {
                   std::string name = read_string(v);
                   auto names = model_names();
                   if (std::find(names.begin(), names.end(), name) == names.end()) {
                     std::string known;
                     for (auto& n : names) known += (known.empty() ? "" : ", ") + n;
                     fail_at(v, "unknown model '" + name + "' (known: " + known + ")");
                   }
                   c.model.name = name;
                 },
                 [](YAML::Emitter& e, const ExperimentConfig& c) { e << c.model.name; }});
    f.push_back(integer("model.num_classes", QAT_CFG(model.num_classes), 1));
    // data
    f.push_back(text("data.train", QAT_CFG(data.train), true));
    f.push_back(text("data.val", QAT_CFG(data.val), true));
    f.push_back(integer("data.image_size", QAT_CFG(data.image_size), 32));
    f.push_back(integer("data.resize", QAT_CFG(data.resize), 1));
    f.push_back(boolean("data.augment.random_crop", QAT_CFG(data.augment.random_crop)));
    f.push_back(integer("data.augment.padding", QAT_CFG(data.augment.padding), 0));
    f.push_back(boolean("data.augment.random_resized_crop", QAT_CFG(data.augment.random_resized_crop)));
    f.push_back(real_list("data.augment.scale", QAT_CFG(data.augment.scale), 2, in_open_closed(0, 1), increasing_pair));
    f.push_back(real_list("data.augment.ratio", QAT_CFG(data.augment.ratio), 2, above(0), increasing_pair));
    f.push_back(boolean("data.augment.hflip", QAT_CFG(data.augment.hflip)));
    f.push_back(real_list("data.mean", QAT_CFG(data.mean), 3, any()));
    f.push_back(real_list("data.std", QAT_CFG(data.std), 3, above(0)));
    f.push_back(integer("data.workers", QAT_CFG(data.workers), 0));
    f.push_back(integer("data.prefetch", QAT_CFG(data.prefetch), 1));
    f.push_back(boolean("data.cache", QAT_CFG(data.cache)));
    f.push_back(enumeration("data.on_bad_image", QAT_CFG(data.on_bad_image), kBadImage));
    // train
    f.push_back(integer("train.epochs", QAT_CFG(train.epochs), 1, /*required=*/true));
    f.push_back(integer("train.batch_size", QAT_CFG(train.batch_size), 1));
    f.push_back(enumeration("train.optimizer", QAT_CFG(train.optimizer), kOptimizers));
    f.push_back(real("train.lr", QAT_CFG(train.lr), above(0)));
    f.push_back(real("train.momentum", QAT_CFG(train.momentum), in_range(0, 1, false)));
    f.push_back(boolean("train.nesterov", QAT_CFG(train.nesterov)));
    f.push_back(real("train.weight_decay", QAT_CFG(train.weight_decay), at_least(0)));
    f.push_back(boolean("train.no_decay_bn_bias", QAT_CFG(train.no_decay_bn_bias)));
    f.push_back(real_list("train.betas", QAT_CFG(train.betas), 2, in_range(0, 1, false)));
    f.push_back(real("train.eps", QAT_CFG(train.eps), above(0)));
    f.push_back(enumeration("train.schedule", QAT_CFG(train.schedule), kSchedules));
    f.push_back(integer("train.step_size", QAT_CFG(train.step_size), 1));
    f.push_back({"train.milestones", false,
                 [](const Value& v, ExperimentConfig& c) {
                   std::vector<int64_t> ms;
                   for (auto& item : read_list(v, "a list of epochs (integers)")) {
                     int64_t m = read_int(item);
                     if (m < 1) fail_at(item, "must be >= 1, got " + std::to_string(m));
                     if (!ms.empty() && m <= ms.back())
                       fail_at(item, "milestones must be strictly increasing, got " + std::to_string(m) + " after " +
                                         std::to_string(ms.back()));
                     ms.push_back(m);
                   }
                   c.train.milestones = ms;
                 },
                 [](YAML::Emitter& e, const ExperimentConfig& c) {
                   e << YAML::Flow << YAML::BeginSeq;
                   for (int64_t m : c.train.milestones) e << std::to_string(m);
                   e << YAML::EndSeq;
                 }});
    f.push_back(real("train.gamma", QAT_CFG(train.gamma), above(0)));
    f.push_back(real("train.min_lr_factor", QAT_CFG(train.min_lr_factor), in_range(0, 1, true)));
    f.push_back(real("train.warmup_epochs", QAT_CFG(train.warmup_epochs), at_least(0)));
    f.push_back(real("train.warmup_start_factor", QAT_CFG(train.warmup_start_factor), in_open_closed(0, 1)));
    f.push_back(real("train.label_smoothing", QAT_CFG(train.label_smoothing), in_range(0, 1, false)));
    f.push_back({"train.seed", false,
                 [](const Value& v, ExperimentConfig& c) {
                   const std::string& s = plain_scalar(v, "a non-negative integer");
                   uint64_t x = 0;
                   auto r = std::from_chars(s.data(), s.data() + s.size(), x);
                   if (r.ec != std::errc() || r.ptr != s.data() + s.size() || s.empty())
                     fail_at(v, "expected a non-negative integer (< 2^64), got " + describe(v.node));
                   c.train.seed = x;
                 },
                 [](YAML::Emitter& e, const ExperimentConfig& c) { e << std::to_string(c.train.seed); }});
    f.push_back(integer("train.threads", QAT_CFG(train.threads), 0));
    f.push_back(integer("train.log_every", QAT_CFG(train.log_every), 1));
    f.push_back(integer("train.max_steps_per_epoch", QAT_CFG(train.max_steps_per_epoch), 0));
    // quant
    f.push_back(boolean("quant.enabled", QAT_CFG(quant.enabled)));
    f.push_back(text("quant.backend", QAT_CFG(quant.backend), false));
    f.push_back(enumeration("quant.method", QAT_CFG(quant.method), kMethods));
    f.push_back(enumeration("quant.ste", QAT_CFG(quant.ste), kSte));
    f.push_back(integer("quant.bits", QAT_CFG(quant.bits), 2));
    f.push_back(enumeration("quant.formula", QAT_CFG(quant.formula), kFormula));
    f.push_back(integer("quant.weight.bits", QAT_CFG(quant.weight.bits), 0));
    f.push_back(enumeration("quant.weight.symmetric", QAT_CFG(quant.weight.symmetric), kChoice));
    f.push_back(enumeration("quant.weight.per_channel", QAT_CFG(quant.weight.per_channel), kChoice));
    f.push_back(integer("quant.activation.bits", QAT_CFG(quant.activation.bits), 0));
    f.push_back(enumeration("quant.activation.symmetric", QAT_CFG(quant.activation.symmetric), kChoice));
    f.push_back(real("quant.averaging_constant", QAT_CFG(quant.averaging_constant), in_open_closed(0, 1)));
    f.push_back(integer("quant.freeze_bn_epoch", QAT_CFG(quant.freeze_bn_epoch), 0));
    f.push_back(integer("quant.observer_off_epoch", QAT_CFG(quant.observer_off_epoch), 0));
    f.push_back({"quant.overrides", false, read_overrides, write_overrides});
    f.push_back({"quant.init_from", false,
                 [](const Value& v, ExperimentConfig& c) {
                   const bool empty = v.node.IsNull() || (v.node.IsScalar() && v.node.Scalar().empty());
                   c.quant.init_from = empty ? std::string() : read_string(v);
                 },
                 [](YAML::Emitter& e, const ExperimentConfig& c) { e << YAML::DoubleQuoted << c.quant.init_from; }});
    // output
    f.push_back(text("output.dir", QAT_CFG(output.dir), true));
    f.push_back({"sweep", false, read_sweep, write_sweep});
    return f;
  }();
  return fields;
}

#undef QAT_CFG

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : path) {
    if (ch == '.') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  parts.push_back(cur);
  return parts;
}

std::string parent_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

std::string last_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// Known key paths: leaves (values) and sections (mappings).
struct Keys {
  std::set<std::string> leaves, sections;
  Keys() {
    for (auto& f : schema()) {
      leaves.insert(f.path);
      for (std::string p = parent_of(f.path); !p.empty(); p = parent_of(p)) sections.insert(p);
    }
  }
  bool known(const std::string& p) const { return leaves.count(p) || sections.count(p); }
  std::vector<std::string> children(const std::string& parent) const {
    std::vector<std::string> out;
    for (auto* set : {&sections, &leaves})
      for (auto& p : *set)
        if (parent_of(p) == parent) out.push_back(last_of(p));
    return out;
  }
};

const Keys& keys() {
  static const Keys k;
  return k;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'train.lr'?)" or " (known keys in 'train': ...)".
std::string suggestion(const std::string& path) {
  const Keys& k = keys();
  std::string parent = parent_of(path), name = last_of(path);
  auto close = [&](const std::string& cand) {
    size_t d = edit_distance(name, cand);
    return d <= 2 && d * 3 <= std::max(name.size(), cand.size());
  };
  // 1. A near miss among the siblings; 2. the same name in another section;
  // 3. a near miss anywhere.
  std::string best;
  size_t best_d = SIZE_MAX;
  for (auto& c : k.children(parent))
    if (close(c) && edit_distance(name, c) < best_d) {
      best_d = edit_distance(name, c);
      best = parent.empty() ? c : parent + "." + c;
    }
  if (best.empty())
    for (auto* set : {&k.leaves, &k.sections})
      for (auto& p : *set)
        if (last_of(p) == name && best.empty()) best = p;
  if (best.empty())
    for (auto* set : {&k.leaves, &k.sections})
      for (auto& p : *set)
        if (close(last_of(p)) && edit_distance(name, last_of(p)) < best_d) {
          best_d = edit_distance(name, last_of(p));
          best = p;
        }
  if (!best.empty()) return " (did you mean '" + best + "'?)";
  if (!k.sections.count(parent) && !parent.empty()) return "";
  std::string known;
  for (auto& c : k.children(parent)) known += (known.empty() ? "" : ", ") + c;
  return " (known keys" + (parent.empty() ? std::string() : " in '" + parent + "'") + ": " + known + ")";
}

// ------------------------------------------------------------ tree walking

// The entries of a mapping, checked: keys are plain strings, no duplicates,
// all known. `node` null counts as an empty mapping.
struct Entry {
  std::string path;
  YAML::Node key, value;
};

std::vector<Entry> entries(const Source& src, const YAML::Node& node, const std::string& prefix, int line) {
  std::vector<Entry> out;
  if (!node.IsDefined() || node.IsNull()) return out;
  if (!node.IsMap()) {
    if (prefix.empty()) QAT_FAIL(src.where(prefix, line), ": expected a mapping of sections (model, data, train, output), got ", describe(node));
    QAT_FAIL(src.where(prefix, line), ": ", prefix, ": expected a mapping (a section), got ", describe(node));
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    YAML::Node key = it->first;  // a copy: `it->` returns a temporary proxy
    int key_line = key.Mark().line;
    if (!key.IsScalar())
      QAT_FAIL(src.where(prefix, key_line), ": ", prefix.empty() ? "" : prefix + ": ", "keys must be plain names, got ",
               describe(key));
    std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
    if (!seen.insert(key.Scalar()).second) QAT_FAIL(src.where(path, key_line), ": ", path, ": duplicate key");
    if (!keys().known(path)) QAT_FAIL(src.where(path, key_line), ": unknown key '", path, "'", suggestion(path));
    out.push_back({path, key, it->second});
  }
  return out;
}

// Checks every mapping of the tree (unknown/duplicate keys, sections that are
// not mappings) and collects the leaf values by key path.
void collect(const Source& src, const YAML::Node& node, const std::string& prefix, int line,
             std::map<std::string, Value>& out) {
  for (auto& e : entries(src, node, prefix, line)) {
    int key_line = e.key.Mark().line;
    if (keys().sections.count(e.path)) {
      out[e.path] = Value{e.path, e.value, src.where(e.path, key_line)};  // where "missing key" errors point
      collect(src, e.value, e.path, key_line, out);
    } else {
      out[e.path] = Value{e.path, e.value, src.where(e.path, key_line)};
    }
  }
}

// Applies one "a.b.c=value" override on the tree.
void apply_override(const Source& src, YAML::Node& root, const std::string& text) {
  auto eq = text.find('=');
  auto trim = [](std::string s) {
    const char* ws = " \t";
    s.erase(0, s.find_first_not_of(ws));
    s.erase(s.find_last_not_of(ws) + 1);
    return s;
  };
  QAT_CHECK(eq != std::string::npos, src.file, ": --set ", text, ": expected key.path=value (e.g. train.lr=0.1)");
  std::string path = trim(text.substr(0, eq));
  std::string value_text = text.substr(eq + 1);
  QAT_CHECK(!path.empty(), src.file, ": --set ", text, ": missing key before '='");
  if (!keys().known(path)) QAT_FAIL(src.file, " (--set ", text, "): unknown key '", path, "'", suggestion(path));
  if (keys().sections.count(path))
    QAT_FAIL(src.file, " (--set ", text, "): '", path, "' is a section; set its keys one at a time (e.g. ", path, ".",
             keys().children(path).front(), "=...)");
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    QAT_FAIL(src.file, " (--set ", text, "): ", path, ": the value is not valid YAML: ", e.msg);
  }
  auto parts = split_path(path);
  YAML::Node cur;
  cur.reset(root);
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (prefix.empty() ? "" : ".") + parts[i];
    YAML::Node child;
    for (auto it = cur.begin(); it != cur.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == parts[i]) child.reset(it->second);
    if (!child.IsDefined() || child.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child.reset(cur[parts[i]]);
    } else if (!child.IsMap()) {
      QAT_FAIL(src.file, " (--set ", text, "): ", prefix, ": expected a mapping (a section) in the file, got ",
               describe(child));
    }
    cur.reset(child);
  }
  cur[parts.back()] = value;
}

fs::path resolve_dir(const Value& v, const fs::path& base) {
  fs::path p(read_string(v));
  if (p.is_relative()) p = base / p;
  p = fs::absolute(p).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  std::error_code ec;
  if (!fs::exists(p, ec)) fail_at(v, "no such directory: " + p.string());
  if (!fs::is_directory(p, ec)) fail_at(v, "not a directory: " + p.string());
  return p;
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  QAT_CHECK(fs::exists(path, ec), "config: cannot open '", path, "': no such file");
  QAT_CHECK(!fs::is_directory(path, ec), "config: cannot open '", path, "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  QAT_CHECK(in.good(), "config: cannot open '", path, "' for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  QAT_CHECK(!in.bad(), "config: error while reading '", path, "'");
  return ss.str();
}

}  // namespace

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Source src{path, {}};
  std::string text = read_file(path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    QAT_FAIL(path, ", line ", e.mark.line + 1, ": YAML syntax error: ", e.msg);
  } catch (const YAML::Exception& e) {
    QAT_FAIL(path, ": YAML error: ", e.what());
  }
  if (!root.IsDefined() || root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
  // Top-level checks first so that --set never writes into a non-mapping root.
  (void)entries(src, root, "", 0);
  for (auto& o : overrides) {
    apply_override(src, root, o);
    auto eq = o.find('=');
    std::string key = o.substr(0, eq);
    key.erase(0, key.find_first_not_of(" \t"));
    key.erase(key.find_last_not_of(" \t") + 1);
    src.overrides[key] = o;
  }

  std::map<std::string, Value> values;
  collect(src, root, "", 0, values);

  ExperimentConfig cfg;
  cfg.source_path = path;
  for (auto& f : schema()) {
    auto it = values.find(f.path);
    if (it == values.end()) {
      if (f.required) {
        std::string section = parent_of(f.path);
        auto sec = values.find(section);
        if (sec == values.end()) QAT_FAIL(path, ": missing required key '", f.path, "' (no '", section, "' section)");
        QAT_FAIL(sec->second.where, ": missing required key '", f.path, "' (in section '", section, "')");
      }
      continue;
    }
    f.read(it->second, cfg);
  }

  // Checks that span keys.
  auto value_of = [&](const std::string& key) -> Value {
    auto it = values.find(key);
    return it != values.end() ? it->second : Value{key, YAML::Node(), path};
  };
  if (!cfg.data.augment.random_resized_crop && cfg.data.resize < cfg.data.image_size) {
    std::string why = " (the resized image is cropped to data.image_size; with data.augment.random_resized_crop "
                      "true data.resize may be smaller)";
    if (values.count("data.resize"))
      fail_at(value_of("data.resize"), "must be >= data.image_size (" + std::to_string(cfg.data.image_size) +
                                           "), got " + std::to_string(cfg.data.resize) + why);
    fail_at(value_of("data.image_size"), "must be <= data.resize (" + std::to_string(cfg.data.resize) +
                                             ", the default), got " + std::to_string(cfg.data.image_size) + why);
  }
  if (cfg.train.schedule == ScheduleKind::multistep && cfg.train.milestones.empty()) {
    Value v = values.count("train.milestones") ? value_of("train.milestones") : value_of("train.schedule");
    fail_at(v, "the multistep schedule needs train.milestones (a non-empty list of epochs)");
  }

  // Paths: data roots relative to the YAML file's folder (made absolute so a
  // copy of the resolved config works from anywhere); output.dir relative to
  // the current directory, kept as written but normalised.
  fs::path base = fs::path(path).parent_path();
  cfg.data.train = resolve_dir(value_of("data.train"), base).string();
  cfg.data.val = resolve_dir(value_of("data.val"), base).string();
  fs::path out = fs::path(cfg.output.dir).lexically_normal();
  if (!out.has_filename() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();
  cfg.output.dir = out.string();
  return cfg;
}

std::string config_to_yaml(const ExperimentConfig& cfg) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  std::vector<std::string> open;  // the sections currently open
  for (auto& f : schema()) {
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
  std::string header = "# qat experiment config (resolved: every key, defaults included)\n";
  if (!cfg.source_path.empty()) header += "# from " + cfg.source_path + "\n";
  return header + e.c_str() + "\n";
}

quant::QConfig make_qconfig(const QuantConfig& q) {
  quant::QConfig c;
  c.method = q.method;
  c.ste = q.ste;
  c.averaging_constant = static_cast<float>(q.averaging_constant);
  c.weight_bits = static_cast<int>(q.weight.bits > 0 ? q.weight.bits : q.bits);
  c.activation_bits = static_cast<int>(q.activation.bits > 0 ? q.activation.bits : q.bits);
  auto opt = [](Choice ch) -> std::optional<bool> {
    if (ch == Choice::auto_) return std::nullopt;
    return ch == Choice::yes;
  };
  c.weight_symmetric = opt(q.weight.symmetric);
  c.weight_per_channel = opt(q.weight.per_channel);
  c.activation_symmetric = opt(q.activation.symmetric);
  if (q.formula == FormulaChoice::minmax) c.formula = quant::ScaleFormula::minmax;
  if (q.formula == FormulaChoice::power_of_two) c.formula = quant::ScaleFormula::power_of_two;
  c.overrides = q.overrides;
  return c;
}

std::string config_hash(const ExperimentConfig& cfg) {
  ExperimentConfig c = cfg;
  c.output.dir.clear();
  c.train.threads = 0;
  c.source_path.clear();
  c.sweep.clear();
  std::string text = config_to_yaml(c);
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
