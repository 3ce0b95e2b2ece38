#include "apps/run_state.h"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <filesystem>
#include <optional>
#include <cstdio>
#include <limits>
#include <set>

#include <yaml-cpp/yaml.h>

#include "apps/file_digest.h"
#include "layers/layers.h"
#include "quant/sim/fake_quantizer.h"
#include "models/checkpoint.h"

namespace qat::apps {

std::vector<Generator*> model_generators(Module& model) {
  std::vector<Generator*> out;
  std::set<Generator*> seen;
  for (auto& [name, m] : model.named_modules())
    if (auto* d = dynamic_cast<Dropout*>(m))
      if (seen.insert(d->generator().get()).second) out.push_back(d->generator().get());
  return out;
}

namespace {

std::string hex_state(const Generator& g) {
  std::string s;
  char buf[17];
  for (uint64_t w : g.state()) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(w));
    s += buf;
  }
  return s;
}

Generator::State parse_state(const std::string& hex, const std::string& path) {
  QAT_CHECK(hex.size() == 64, "checkpoint ", path, ": malformed generator state '", hex, "'");
  Generator::State st{};
  for (int i = 0; i < 4; ++i) st[i] = std::stoull(hex.substr(16 * i, 16), nullptr, 16);
  return st;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

const std::string& meta(const Metadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  QAT_CHECK(it != m.end(), "checkpoint ", path, ": metadata '", key, "' is missing (not a qat training checkpoint?)");
  return it->second;
}

}  // namespace


std::string first_non_finite(const Module& model, const Optimizer* optimizer) {
  for (const auto& [name, t] : model.named_parameters())
    if (!all_finite(t)) return name;
  for (const auto& [name, t] : model.named_buffers())
    if (!all_finite(t)) return name;
  if (optimizer)
    for (const auto& [name, t] : optimizer->state_dict())
      if (!all_finite(t)) return name;
  return "";
}

// An observer's range that never saw data: min_val all +inf or max_val all
// -inf, as observers start (a diverged run gives NaN or values of both signs).
bool never_observed(const Module& model, const std::string& name) {
  const bool is_min = name.ends_with(".min_val"), is_max = name.ends_with(".max_val");
  if (!is_min && !is_max) return false;
  for (const auto& [n, t] : model.named_buffers()) {
    if (n != name || t.dtype() != DType::f32) continue;
    const Tensor h = t.to(Device::cpu).contiguous();
    const float start = is_min ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < h.numel(); ++i)
      if (h.data<float>()[i] != start) return false;
    return h.numel() > 0;
  }
  return false;
}

Metadata quantizer_specs(Module& model) {
  Metadata m;
  int64_t n = 0;
  for (auto& [name, mod] : model.named_modules())
    if (const auto* fq = dynamic_cast<const quant::FakeQuantizer*>(mod)) {
      m["quantizer." + name] = fq->config().spec.describe();
      ++n;
    }
  m["quantizers"] = std::to_string(n);
  return m;
}

namespace {
constexpr const char* kMetadataDigest = "metadata_sha256";

// Every entry but the digest's own, in key order.
std::string metadata_digest(const Metadata& m) {
  std::string text;
  for (const auto& [k, v] : m)
    if (k != kMetadataDigest) {
      text += k;
      text += '\0';
      text += v;
      text += '\0';
    }
  return sha256_text(text);
}
}  // namespace

// Note [model source digest]: a network from a file (model.onnx, model.file)
// is named by the file, so a file changed since a checkpoint was saved (a
// layer without parameters added, a stride changed) would load the same
// tensors into another network. Checkpoints record the file's SHA-256 (a
// model file's YAML as parsed: comments and layout aside), and loading one
// with a config whose file now differs is refused.
std::string model_source_digest(const ExperimentConfig& cfg) {
  if (!cfg.model.onnx.empty()) return sha256_file(cfg.model.onnx);
  if (!cfg.model.file.empty()) return sha256_text(YAML::Dump(YAML::LoadFile(cfg.model.file)));
  return "";
}

Metadata run_state_metadata(Module& model, const Optimizer* optimizer, const RunState& s, const ExperimentConfig& cfg,
                            const Metadata& extra) {
  const std::string config_hash = apps::config_hash(cfg);
  Metadata m{{"format", "qat-train-1"},
             {"epoch", std::to_string(s.epoch)},
             {"step", std::to_string(s.step)},
             {"best_top1", num(s.best_top1)},
             {"epoch_loss_sum", num(s.epoch_loss_sum)},
             {"epoch_correct", std::to_string(s.epoch_correct)},
             {"epoch_images", std::to_string(s.epoch_images)},
             {"config_hash", config_hash},
             {"config_hash_data_apart", apps::config_hash_data_apart(cfg)}};
  if (s.best_epoch > 0) m["best_epoch"] = std::to_string(s.best_epoch);
  if (!s.epoch_rows.empty()) {
    m["metrics_csv_row"] = s.epoch_rows.csv;
    m["metrics_jsonl_row"] = s.epoch_rows.jsonl;
  }
  const auto gens = model_generators(model);
  for (size_t i = 0; i < gens.size(); ++i) m["generator" + std::to_string(i)] = hex_state(*gens[i]);
  for (const auto& [k, v] : quantizer_specs(model)) m[k] = v;
  m["model_sha256"] = sha256_tensors(model.state_dict());
  if (!s.classes.empty()) {  // joined by '/', which no folder name holds
    std::string joined;
    for (const auto& c : s.classes) joined += (joined.empty() ? "" : "/") + c;
    m["classes"] = joined;
  }
  for (const auto& [k, v] : extra) m[k] = v;
  m["model"] = cfg.model.name;
  if (const std::string source = model_source_digest(cfg); !source.empty()) m["model_source_sha256"] = source;
  m["num_classes"] = std::to_string(cfg.model.num_classes);
  m["kind"] = checkpoint_kind_name(checkpoint_kind_of(cfg, extra.count("calibrator") > 0));
  if (optimizer) m["optimizer_sha256"] = sha256_tensors(optimizer->state_dict());
  m[kMetadataDigest] = metadata_digest(m);
  return m;
}

const char* checkpoint_kind_name(CheckpointKind k) {
  switch (k) {
    case CheckpointKind::float_model: return "float";
    case CheckpointKind::qat: return "qat";
    case CheckpointKind::calibrated: return "calibrated";
    case CheckpointKind::int8_training: return "int8";
  }
  return "?";
}

CheckpointKind checkpoint_kind_of(const ExperimentConfig& cfg, bool calibrated) {
  if (calibrated) return CheckpointKind::calibrated;
  if (!cfg.quant.enabled) return CheckpointKind::float_model;
  return cfg.quant.int8_training.enabled ? CheckpointKind::int8_training : CheckpointKind::qat;
}

std::vector<CheckpointKind> kinds_loaded_by(const ExperimentConfig& cfg) {
  const CheckpointKind own = checkpoint_kind_of(cfg);
  if (own == CheckpointKind::qat) return {CheckpointKind::qat, CheckpointKind::calibrated};
  return {own};
}

namespace {

const char* kind_words(CheckpointKind k) {
  switch (k) {
    case CheckpointKind::float_model: return "a float (FP32) checkpoint";
    case CheckpointKind::qat: return "a QAT checkpoint";
    case CheckpointKind::calibrated: return "a calibration (qat calibrate)";
    case CheckpointKind::int8_training: return "a checkpoint of INT8 training (quant.int8_training)";
  }
  return "?";
}

const char* model_words(CheckpointKind k) {
  switch (k) {
    case CheckpointKind::float_model: return "a float model";
    case CheckpointKind::qat: return "a QAT model";
    case CheckpointKind::calibrated: return "a calibrated model";
    case CheckpointKind::int8_training: return "a model with INT8 training";
  }
  return "?";
}

// The recorded kind, or what a checkpoint from before the record shows;
// nullopt when it shows nothing (a bare save_checkpoint).
std::optional<CheckpointKind> recorded_kind(const Metadata& m) {
  if (const auto k = m.find("kind"); k != m.end()) {
    for (CheckpointKind c : {CheckpointKind::float_model, CheckpointKind::qat, CheckpointKind::calibrated,
                             CheckpointKind::int8_training})
      if (k->second == checkpoint_kind_name(c)) return c;
    return std::nullopt;
  }
  if (m.count("calibrator")) return CheckpointKind::calibrated;
  if (const auto q = m.find("quantizers"); q != m.end())
    return q->second == "0" ? CheckpointKind::float_model : CheckpointKind::qat;
  return std::nullopt;
}

// "a folder holding an export (qat export)", or what a file that is not a checkpoint looks like.
std::string folder_words(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(path) / "manifest.yaml", ec)) return "an export folder (qat export), not a checkpoint";
  if (fs::exists(fs::path(path) / "best.safetensors", ec) || fs::exists(fs::path(path) / "last.safetensors", ec))
    return "a training run folder, not a checkpoint: name its best.safetensors or last.safetensors";
  if (fs::exists(fs::path(path) / "calibrated.safetensors", ec))
    return "a calibration folder, not a checkpoint: name its calibrated.safetensors";
  return "a folder, not a checkpoint file";
}

}  // namespace

Metadata check_checkpoint_identity(const std::string& path, const ExperimentConfig& cfg,
                               const std::vector<CheckpointKind>& accepted, const std::string& role,
                               const std::string& hint) {
  std::error_code ec;
  QAT_CHECK(!std::filesystem::is_directory(path, ec), role, " ", path, " is ", folder_words(path), "; ", hint);
  const Metadata m = load_safetensors_metadata(path);  // a file of another format is named there
  const auto model = m.find("model"), classes = m.find("num_classes");
  const std::string want_classes = std::to_string(cfg.model.num_classes);
  if (model != m.end())
    QAT_CHECK(model->second == cfg.model.name && (classes == m.end() || classes->second == want_classes), role, " ",
              path, " holds a ", model->second, " model",
              classes == m.end() ? std::string() : " with " + classes->second + " classes", ", but config ",
              cfg.source_path, " builds ", cfg.model.name, " with ", want_classes,
              " classes (model.name, model.num_classes); give a checkpoint of that model, or the config it was "
              "trained with");
  if (const auto source = m.find("model_source_sha256"); source != m.end()) {  // Note [model source digest]
    const std::string now = model_source_digest(cfg), file = cfg.model.onnx.empty() ? cfg.model.file : cfg.model.onnx;
    QAT_CHECK(now.empty() || now == source->second, role, " ", path, " was saved with the network of ", file,
              " as it was then, and that file has changed since (model_source_sha256 ", source->second.substr(0, 16),
              "..., now ", now.substr(0, 16), "...): its tensors would load into another network; restore the file, "
              "or train again");
  }
  const std::optional<CheckpointKind> kind = recorded_kind(m);
  if (!kind || std::find(accepted.begin(), accepted.end(), *kind) != accepted.end()) return m;
  std::string wants;
  for (size_t i = 0; i < accepted.size(); ++i)
    wants += std::string(i == 0 ? "" : i + 1 == accepted.size() ? " or " : ", ") + kind_words(accepted[i]);
  QAT_FAIL(role, " ", path, " is ", kind_words(*kind), ", not ", wants, "; ", hint);
}

void save_run_state(const std::string& path, Module& model, const Optimizer* optimizer, const RunState& s,
                    const ExperimentConfig& cfg, const Metadata& extra) {
  save_checkpoint(path, model, optimizer, run_state_metadata(model, optimizer, s, cfg, extra));
}

namespace {

// The recorded quantizer specs against those of the model the loading
// config built, before any tensor is read (a checkpoint saved before they
// were recorded has no "quantizers" and is not checked).
void check_quantizer_specs(const std::string& path, const Metadata& saved, Module& model,
                           const ExperimentConfig& cfg) {
  if (!saved.count("quantizers")) return;
  const Metadata built = quantizer_specs(model);
  std::vector<std::string> differ;
  auto spec_in = [](const Metadata& m, const std::string& key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("none") : it->second;
  };
  std::set<std::string> keys;
  for (const Metadata* m : {&saved, &built})
    for (const auto& [k, v] : *m)
      if (k.rfind("quantizer.", 0) == 0) keys.insert(k);
  for (const std::string& k : keys)
    if (spec_in(saved, k) != spec_in(built, k))
      differ.push_back(k.substr(10) + ": " + spec_in(saved, k) + " (the config: " + spec_in(built, k) + ")");
  if (differ.empty()) return;
  std::string list;
  for (size_t i = 0; i < differ.size() && i < 4; ++i) list += (i ? "; " : "") + differ[i];
  if (differ.size() > 4) list += "; and " + std::to_string(differ.size() - 4) + " more";
  QAT_FAIL("checkpoint ", path, " was saved with other quantizers than config ", cfg.source_path, " builds: ", list,
           "; load it with the quant settings it was trained or calibrated with");
}

// Metadata `key` parsed whole by `parse` (std::stoll or std::stod) and
// inside [lo, hi]; otherwise an error naming the file, the key and the text.
template <class T, class Parse>
T ranged_meta(const Metadata& m, const std::string& key, const std::string& path, T lo, T hi, Parse parse,
              const char* kind) {
  const std::string& text = meta(m, key, path);
  size_t used = 0;
  T v = 0;
  // As qat writes them: no spaces, no hexadecimal (stoll/stod skip leading spaces and read 0x10).
  const bool plain = text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  try {
    if (plain) v = parse(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  QAT_CHECK(used > 0 && used == text.size() && std::isfinite(static_cast<double>(v)) && v >= lo && v <= hi,
            "checkpoint ", path, ": metadata '", key, "' is '", text, "', expected ", kind, " in [", lo, ", ", hi, "]");
  return v;
}

int64_t int_meta(const Metadata& m, const std::string& key, const std::string& path, int64_t lo, int64_t hi) {
  return ranged_meta<int64_t>(
      m, key, path, lo, hi, [](const std::string& t, size_t* used) { return std::stoll(t, used); }, "an integer");
}

double real_meta(const Metadata& m, const std::string& key, const std::string& path, double lo, double hi) {
  return ranged_meta<double>(
      m, key, path, lo, hi, [](const std::string& t, size_t* used) { return std::stod(t, used); }, "a number");
}

// Progress metadata, each value in its range (a hand-edited or corrupted
// file is refused before the run directory is touched).
RunState parse_progress(const Metadata& m, const std::string& path) {
  constexpr int64_t kMax = int64_t{1} << 53;
  RunState s;
  s.epoch = int_meta(m, "epoch", path, 0, kMax);
  s.step = int_meta(m, "step", path, 0, kMax);
  const double best = real_meta(m, "best_top1", path, -1, 1);
  QAT_CHECK(best == -1 || best >= 0, "checkpoint ", path, ": metadata 'best_top1' is ", best,
            ", expected -1 (none yet) or a fraction in [0, 1]");
  s.best_top1 = best;
  s.epoch_images = int_meta(m, "epoch_images", path, 0, kMax);
  s.epoch_correct = int_meta(m, "epoch_correct", path, 0, s.epoch_images);
  s.epoch_loss_sum = real_meta(m, "epoch_loss_sum", path, 0, std::numeric_limits<double>::max());
  if (m.count("best_epoch")) s.best_epoch = int_meta(m, "best_epoch", path, 1, s.epoch);
  const auto csv = m.find("metrics_csv_row"), jsonl = m.find("metrics_jsonl_row");
  QAT_CHECK((csv == m.end()) == (jsonl == m.end()), "checkpoint ", path,
            ": metadata holds one of metrics_csv_row and metrics_jsonl_row without the other");
  if (csv != m.end()) s.epoch_rows = {csv->second, jsonl->second};
  return s;
}

}  // namespace

namespace {
// Every quantizer's stored zero points on its grid: a checkpoint of other
// quant settings, or an edited one, would otherwise fail later inside
// fake_quantize naming neither the tensor nor the file.
void check_zero_points(Module& model, const std::string& path) {
  for (auto& [name, mod] : model.named_modules()) {
    const auto* fq = dynamic_cast<const quant::FakeQuantizer*>(mod);
    if (!fq) continue;
    const quant::QuantSpec& spec = fq->config().spec;
    const Tensor zp = fq->qparams().zero_point.to(Device::cpu).contiguous();
    for (int64_t c = 0; c < zp.numel(); ++c) {
      const int32_t z = zp.data<int32_t>()[c];
      QAT_CHECK(z >= spec.qmin() && z <= spec.qmax(), "checkpoint ", path, ": tensor 'model.", name,
                ".zero_point' holds ", z, " at channel ", c, ", off the quantizer's ", spec.describe(), " grid [",
                spec.qmin(), ", ", spec.qmax(), "] (trained with other quant settings?)");
    }
  }
}
}  // namespace

namespace {
// load_checkpoint, then the model's tensors against the recorded digest.
Metadata load_verified(const std::string& path, Module& model, Optimizer* optimizer) {
  TensorMap stored_optimizer;  // (checked even where not loaded: a corrupted file is refused whatever reads it)
  const Metadata m = load_checkpoint(path, model, optimizer, &stored_optimizer);
  auto check = [&](const char* key, const char* what, const std::string& now) {
    const std::string& saved = m.at(key);
    QAT_CHECK(now == saved, "checkpoint ", path, ": ", what, " do not match the digest saved with them (", key, " ",
              saved.substr(0, 16), "..., read ", now.substr(0, 16), "...): the file is corrupted");
  };
  if (m.count(kMetadataDigest)) check(kMetadataDigest, "the metadata (progress, settings, digests)", metadata_digest(m));
  if (m.count("model_sha256")) check("model_sha256", "the model's tensors", sha256_tensors(model.state_dict()));
  if (m.count("optimizer_sha256"))
    check("optimizer_sha256", "the optimizer's state tensors",
          sha256_tensors(optimizer ? optimizer->state_dict() : stored_optimizer));
  return m;
}
}  // namespace

Metadata load_model_checked(const std::string& path, Module& model, Optimizer* optimizer) {
  const Metadata m = load_verified(path, model, optimizer);
  check_zero_points(model, path);
  return m;
}

namespace {

// A checkpoint's recorded classes (metadata "classes"); empty when it has none.
std::vector<std::string> recorded_classes(const Metadata& m, const std::string& path) {
  std::vector<std::string> out;
  const auto c = m.find("classes");
  if (c == m.end()) return out;
  for (size_t at = 0; at <= c->second.size();) {
    const size_t slash = std::min(c->second.find('/', at), c->second.size());
    out.push_back(c->second.substr(at, slash - at));
    QAT_CHECK(!out.back().empty(), "checkpoint ", path, ": metadata 'classes' holds an empty class name");
    at = slash + 1;
  }
  return out;
}

}  // namespace

// What tells two lists of class folders apart: "val lacks dog; val has
// bird, which train lacks" (or, the same names, their order).
std::string class_folders_difference(std::vector<std::string> train, std::vector<std::string> val) {
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    return v.size() > 8 ? s + ", ... (" + std::to_string(v.size()) + " in all)" : s;
  };
  std::sort(train.begin(), train.end()), std::sort(val.begin(), val.end());
  std::vector<std::string> missing, extra;
  std::set_difference(train.begin(), train.end(), val.begin(), val.end(), std::back_inserter(missing));
  std::set_difference(val.begin(), val.end(), train.begin(), train.end(), std::back_inserter(extra));
  std::string out;
  if (!missing.empty()) out += "val lacks " + join(missing);
  if (!extra.empty()) out += (out.empty() ? "" : "; ") + std::string("val has ") + join(extra) + ", which train lacks";
  return out.empty() ? "the same names in another order" : out;
}

void check_same_classes(const std::vector<std::string>& recorded, const std::vector<std::string>& folders,
                        const std::string& op, const std::string& source, const std::string& folder_root) {
  for (size_t i = 0; i < std::min(recorded.size(), folders.size()); ++i)
    QAT_CHECK(recorded[i] == folders[i], op, ": ", source, " has class ", i, " '", recorded[i], "', but ", folder_root,
              " has '", folders[i], "' there (class folders in sorted order)");
  QAT_CHECK(recorded.size() == folders.size(), op, ": ", source, " has ", recorded.size(), " classes, ", folder_root,
            " ", folders.size(), " class folders");
}

RunState load_run_state(const std::string& path, Module& model, Optimizer* optimizer, const ExperimentConfig* cfg,
                        ConfigMatch match) {
  if (cfg && match != ConfigMatch::any) {
    const Metadata saved = check_checkpoint_identity(path, *cfg, kinds_loaded_by(*cfg), "checkpoint",
                              "config " + cfg->source_path + " builds " + model_words(checkpoint_kind_of(*cfg)) +
                                  " (quant.enabled " + (cfg->quant.enabled ? "true" : "false") +
                                  ", quant.int8_training.enabled " +
                                  (cfg->quant.int8_training.enabled ? "true" : "false") +
                                  "): load it with the config it was saved with");
    check_quantizer_specs(path, saved, model, *cfg);
  }
  const Metadata m = load_verified(path, model, optimizer);
  const auto format = m.find("format");
  QAT_CHECK(format == m.end() || format->second == "qat-train-1", "checkpoint ", path, ": metadata 'format' is '",
            format == m.end() ? "" : format->second, "', not qat-train-1 (not a qat training checkpoint?)");
  const std::string& hash = meta(m, "config_hash", path);
  if (cfg && match == ConfigMatch::whole_config) {
    const std::string expected = config_hash(*cfg);
    // The data folders may have moved (checkpoints saved since the record; the classes are checked apart).
    const auto apart = m.find("config_hash_data_apart");
    const bool moved = hash != expected && apart != m.end() && apart->second == config_hash_data_apart(*cfg);
    QAT_CHECK(hash == expected || moved, "checkpoint ", path, " was trained with config hash ", hash,
              " but the config now hashes to ", expected,
              "; resume with the same config (output.dir, train.threads and, for checkpoints that record "
              "config_hash_data_apart, the data folders may differ)");
  }
  check_zero_points(model, path);
  RunState s = parse_progress(m, path);
  s.classes = recorded_classes(m, path);
  if (const auto d = m.find("model_sha256"); d != m.end()) s.loaded_model_sha256 = d->second;
  const auto gens = model_generators(model);
  for (size_t i = 0; i < gens.size(); ++i)
    gens[i]->set_state(parse_state(meta(m, "generator" + std::to_string(i), path), path));
  return s;
}

}  // namespace qat::apps
