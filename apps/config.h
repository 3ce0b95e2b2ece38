#pragma once
// ExperimentConfig: everything a `qat train` run needs, loaded from YAML with
// strict validation (unknown key, wrong type, out-of-range value, missing
// path: an error naming the key path and the YAML line, before any work).
// Only apps/ parses YAML (docs/architecture.md).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "models/models.h"
#include "optim/lr_schedule.h"
#include "quant/backend.h"
#include "quant/int8_training/int8_ops.h"

namespace qat::apps {

// The most threads train.threads and --threads take ("0": all cores).
constexpr int64_t kMaxThreads = 1024;


enum class OptimizerKind { sgd, adamw };
constexpr auto enum_names(OptimizerKind) {
  return std::to_array<EnumName<OptimizerKind>>({{OptimizerKind::sgd, "sgd"}, {OptimizerKind::adamw, "adamw"}});
}
// Data-parallel runs: whether a communication thread sums the gradients
// while backward runs (docs/distributed.md). auto: when this process's share
// of the cores leaves one for it (train.threads + 1 <= share).
enum class OverlapPolicy { auto_, on, off };
constexpr auto enum_names(OverlapPolicy) {
  return std::to_array<EnumName<OverlapPolicy>>(
      {{OverlapPolicy::auto_, "auto"}, {OverlapPolicy::on, "on"}, {OverlapPolicy::off, "off"}});
}

enum class BadImagePolicy { error, skip };
constexpr auto enum_names(BadImagePolicy) {
  return std::to_array<EnumName<BadImagePolicy>>({{BadImagePolicy::error, "error"}, {BadImagePolicy::skip, "skip"}});
}

struct ModelConfig {
  std::string name = "alexnet_bn";  // a built-in's, or the model file's name:
  int64_t num_classes = 10;
  ResNetStem stem = ResNetStem::imagenet;  // written only for models that take it (takes_stem)
  std::string file{};  // model.file: a model file (absolute path) instead of a built-in (apps/model_file.h)
  std::string onnx{};  // model.onnx: a float ONNX model (absolute path), weights included (apps/onnx_import.h)
  ModelOptions options() const { return {stem}; }
  bool built_in() const { return file.empty() && onnx.empty(); }
  bool is_graph() const { return !built_in() || model_is_graph(name); }
  bool takes_stem() const { return built_in() && model_takes_stem(name); }
  // A file's least size is found by its dry run (dry_run_model).
  int64_t min_input_size() const { return built_in() ? model_min_input_size(name) : 1; }
};

struct AugmentConfig {
  bool random_crop = true;          // random image_size crop of the resized image (else centre crop)
  int64_t padding = 0;              // zero padding before the random crop
  bool random_resized_crop = false;  // torchvision RandomResizedCrop instead of resize + random crop
  std::vector<double> scale = {0.08, 1.0};
  std::vector<double> ratio = {3.0 / 4.0, 4.0 / 3.0};
  bool hflip = true;                // horizontal flip with probability 0.5
};

struct DataConfig {
  std::string train;   // ImageFolder roots (relative paths: relative to the YAML file's folder)
  std::string val;
  int64_t image_size = 128;  // crop fed to the network
  int64_t resize = 144;      // shorter side before cropping
  AugmentConfig augment;
  std::vector<double> mean = {0.485, 0.456, 0.406};
  std::vector<double> std = {0.229, 0.224, 0.225};
  int64_t workers = 2;
  int64_t prefetch = 4;      // batches decoded ahead
  bool cache = false;        // keep decoded, resized uint8 images in memory
  BadImagePolicy on_bad_image = BadImagePolicy::error;
  int64_t max_image_pixels = int64_t{1} << 26;  // a file declaring more is refused before decoding
  double max_aspect_ratio = 32.0;               // long side / short side
};

struct TrainConfig {
  int64_t epochs = 10;
  int64_t batch_size = 64;
  OptimizerKind optimizer = OptimizerKind::sgd;
  double lr = 0.02;
  double momentum = 0.9;
  bool nesterov = false;
  // Data-parallel runs (mpirun): batch norm statistics over the global batch
  // of all processes instead of each process's part (docs/distributed.md).
  bool sync_bn = false;
  OverlapPolicy overlap_allreduce = OverlapPolicy::auto_;
  double weight_decay = 5e-4;
  bool no_decay_bn_bias = false;
  std::vector<double> betas = {0.9, 0.999};  // AdamW
  double eps = 1e-8;                        // AdamW
  LrScheduleKind schedule = LrScheduleKind::cosine;
  int64_t step_size = 30;                   // step schedule, epochs
  std::vector<int64_t> milestones;          // multistep schedule, epochs
  double gamma = 0.1;
  double min_lr_factor = 0.0;               // cosine floor as a fraction of lr
  double warmup_epochs = 0;
  double warmup_start_factor = 0.1;
  double label_smoothing = 0.0;
  uint64_t seed = 0;
  int64_t threads = 0;                      // 0: all cores
  // Where the training step runs (--device); cuda is refused until every op
  // of the step has a CUDA kernel (apps/device_check.h).
  Device device = Device::cpu;
  int64_t log_every = 20;                   // steps between plain progress lines
  int64_t max_steps_per_epoch = 0;          // 0: whole epoch (tests and smoke runs use a cap)
};

// A setting that may be left to the backend ("auto"); nullopt stands for auto.
enum class Choice { auto_, yes, no };
constexpr auto enum_names(Choice) {
  return std::to_array<EnumName<Choice>>({{Choice::auto_, "auto"}, {Choice::yes, "true"}, {Choice::no, "false"}});
}
std::optional<bool> choice_value(Choice c);
enum class FormulaChoice { auto_, minmax, power_of_two, amax_over_qmax };
constexpr auto enum_names(FormulaChoice) {
  return std::to_array<EnumName<FormulaChoice>>({{FormulaChoice::auto_, "auto"},
                                                 {FormulaChoice::minmax, "minmax"},
                                                 {FormulaChoice::power_of_two, "power_of_two"},
                                                 {FormulaChoice::amax_over_qmax, "amax_over_qmax"}});
}
std::optional<quant::ScaleFormula> formula_value(FormulaChoice f);

struct QuantTensorConfig {
  int64_t bits = 0;  // 0: quant.bits
  Choice symmetric = Choice::auto_;
  Choice per_channel = Choice::auto_;  // weights only
};

// quant.int8_training: the three GEMMs of every quantized layer on integers
// (quant/int8_training/int8_ops.h), each technique switchable.
struct Int8TrainingConfig {
  bool enabled = false;
  // The gradient quantizers, as the layers take them: gradient_bits (bits),
  // rounding, clipping, period, lr_scaling.{enabled, alpha, beta}.
  quant::Int8GradConfig grad;
  std::vector<std::string> keep_float;  // layers that keep float GEMMs (plain QAT)
};

struct QuantConfig {
  bool enabled = false;
  std::string backend = "default";  // configs/backends/<name>.yaml, or a path to a backend YAML
  quant::QuantMethod method = quant::QuantMethod::moving_average;
  quant::SteKind ste = quant::SteKind::clipped;
  int64_t bits = 8;                 // weights and activations unless weight.bits / activation.bits say otherwise
  FormulaChoice formula = FormulaChoice::auto_;
  QuantTensorConfig weight, activation;
  double averaging_constant = 0.01;  // moving_average observers
  int64_t freeze_bn_epoch = 0;       // from this (1-based) epoch on BN uses running statistics; 0: never
  int64_t observer_off_epoch = 0;    // from this epoch on observers are off (qparams frozen); 0: never
  int64_t bn_reestimation_batches = 0;  // at each epoch's end, BN statistics re-estimated on this many batches; 0: off
  std::map<std::string, quant::LayerBits> overrides;  // per module name, e.g. features.0: {weight_bits: 8}
  std::string init_from;             // float checkpoint to start from (relative to the current directory)
  Int8TrainingConfig int8_training;
  // quant.integer_forward: QAT layers compute their forward on the integer
  // GEMMs, gradients staying QAT's (quant/int8_training/int8_ops.h, Note [integer
  // forward of QAT layers]); INT8 training's forward already is.
  bool integer_forward = false;
};

struct OutputConfig {
  std::string dir = "runs/default";
};

struct ExperimentConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  QuantConfig quant;
  OutputConfig output;
  // `sweep:` lists of values for chosen keys ("quant.bits" -> ["8", "4"]), in
  // file order; only `qat sweep` uses it.
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  std::string source_path;  // the YAML file it came from
};

// The QConfig prepare() takes, from the `quant:` section.
quant::QConfig make_qconfig(const QuantConfig& q);

// Whether data.train and data.val must be existing folders (to train or
// evaluate) or are taken as recorded (to read a run's config.yaml after its
// data moved).
enum class DataPaths { must_exist, as_recorded };

// Loads and validates `path`, applying `overrides` ("train.lr=0.1",
// "data.workers=4", ...) on the YAML tree first. Relative data paths resolve
// against the YAML file's folder, output.dir against the current directory
// (where the user runs qat).
ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                             DataPaths data_paths = DataPaths::must_exist);
// The resolved config as YAML (every key, defaults included).
std::string config_to_yaml(const ExperimentConfig& cfg);
// Whether the file at `path` is a config_to_yaml() output (its first line is
// the resolved-config header qat writes).
bool is_resolved_config(const std::string& path);
// A stable hex hash of config_to_yaml() without output.dir, train.threads and
// train.device (things that may change on resume without changing the
// experiment; train.device is left out of the text, so runs recorded before
// the key existed keep their hash).
std::string config_hash(const ExperimentConfig& cfg);
// config_hash() with data.train and data.val left out too: the same
// experiment on data read from another place (a moved dataset, a node's own
// copy). Recorded in checkpoints as "config_hash_data_apart".
std::string config_hash_data_apart(const ExperimentConfig& cfg);
// {section, hash of that section alone} for model, data, train and quant,
// leaving out what config_hash_data_apart does and how the data are read
// (data.workers, data.prefetch, data.cache): what the processes of a
// data-parallel run must agree on, section by section.
std::vector<std::pair<std::string, std::string>> config_section_hashes(const ExperimentConfig& cfg);

}  // namespace qat::apps
