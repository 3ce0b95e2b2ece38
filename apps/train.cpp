#include "apps/train.h"
#include "apps/model_file.h"

#include <fcntl.h>
#include <sched.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "apps/backend_config.h"
#include "apps/config.h"
#include "apps/data_parallel.h"
#include "apps/device_check.h"
#include "apps/integer_io.h"
#include "apps/metrics_log.h"
#include "apps/mpi_run.h"
#include "apps/progress.h"
#include "apps/run_folder.h"
#include "apps/run_lock.h"
#include "apps/run_state.h"
#include "apps/yaml_value.h"
#include "core/autograd.h"
#include "core/collective.h"
#include "core/ops.h"
#include "core/text_file.h"
#include "core/threads.h"
#include "data/loader.h"
#include "data/memory_limit.h"
#include "layers/graph.h"
#include "models/checkpoint.h"
#include "models/models.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
#include "quant/sim/bn_reestimation.h"
#include "quant/convert/integer_eval.h"
#include "quant/sim/int8_training.h"
#include "quant/sim/calibration.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"

namespace qat::apps {

namespace fs = std::filesystem;

namespace {

// Ctrl-C or SIGTERM: the handler only raises a flag; the loop finishes its
// step, saves `last` and exits non-zero. A second one stops at once (exit
// status 130, nothing saved: the checkpoints already written stay as they are).
volatile std::sig_atomic_t g_interrupted = 0;
int g_interrupt_scopes = 0;  // nested scopes: a sweep's around each of its runs'
void on_interrupt(int) {
  if (g_interrupted) ::_exit(130);  // async-signal-safe
  g_interrupted = 1;
}

}  // namespace

InterruptScope::InterruptScope() {
  if (g_interrupt_scopes++ > 0) return;  // the outermost scope installs the handlers and clears the flag
  g_interrupted = 0;
  prev_int_ = std::signal(SIGINT, on_interrupt);
  prev_term_ = std::signal(SIGTERM, on_interrupt);
}

InterruptScope::~InterruptScope() {
  if (--g_interrupt_scopes > 0) return;
  std::signal(SIGINT, prev_int_);
  std::signal(SIGTERM, prev_term_);
}

bool InterruptScope::interrupted() { return g_interrupted != 0; }

namespace {

// Quantizer parameters (LSQ steps and offsets) train in a group of their own
// without weight decay; everything else as the config says.
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& t, Module& model) {
  NamedTensors regular, quantizer;
  for (auto& [name, p] : model.named_parameters()) {
    const bool q = name.size() > 5 && (name.substr(name.size() - 5) == ".step" ||
                                        (name.size() > 7 && name.substr(name.size() - 7) == ".offset"));
    (q ? quantizer : regular).emplace_back(name, p);
  }
  auto groups = make_param_groups(regular, t.lr, t.weight_decay, t.no_decay_bn_bias);
  if (!quantizer.empty()) {
    ParamGroup g{"quantizer", {}, t.lr, 0.0};
    for (auto& [name, p] : quantizer) g.params.push_back(p);
    groups.push_back(std::move(g));
  }
  if (t.optimizer == OptimizerKind::adamw)
    return std::make_unique<AdamW>(std::move(groups), AdamWOptions{t.betas[0], t.betas[1], t.eps});
  return std::make_unique<SGD>(std::move(groups), SGDOptions{t.momentum, 0.0, t.nesterov});
}

LrScheduleOptions schedule_options(const TrainConfig& t) {
  LrScheduleOptions o;
  o.kind = t.schedule;
  o.gamma = t.gamma;
  o.step_size = static_cast<double>(t.step_size);
  for (int64_t m : t.milestones) o.milestones.push_back(static_cast<double>(m));
  o.warmup = t.warmup_epochs;
  o.warmup_start_factor = t.warmup_start_factor;
  o.total = std::max(1e-9, static_cast<double>(t.epochs) - t.warmup_epochs);
  o.eta_min = t.min_lr_factor;
  return o;
}


// What a run stopped for a non-finite value leaves behind, for its message.
std::string checkpoints_left(const std::string& run_dir) {
  const std::string last = run_dir + "/last.safetensors";
  if (!fs::exists(last)) return "No checkpoint was saved (" + run_dir + " has no last.safetensors).";
  return "The last good checkpoint, " + last + ", is unchanged.";
}

// Before anything of an epoch (or an interrupted one) is written: a weight or
// optimizer state that became NaN or infinite (the loss of the step before
// can still have been finite) stops the run, and the checkpoints already
// written stay as they are. One scan for every file written after it.
void require_finite_state(const Module& model, const Optimizer* optimizer, int64_t epoch, const std::string& run_dir) {
  const std::string bad = first_non_finite(model, optimizer);
  if (bad.empty()) return;
  QAT_CHECK(!never_observed(model, bad), "train: observer '", bad, "' never observed a tensor (its range is still "
            "the empty one it starts with) at epoch ", epoch, ": its observers were turned off before any data "
            "reached them (quant.observer_off_epoch) and nothing calibrated them; stopping without writing a "
            "checkpoint. ", checkpoints_left(run_dir));
  QAT_FAIL("train: '", bad, "' holds NaN or infinite values at epoch ", epoch,
           " (the run diverged: a lower train.lr may help); stopping without writing a checkpoint. ",
           checkpoints_left(run_dir));
}

// Epoch-dependent QAT switches (1-based epochs in the config).
void apply_quant_schedule(const QuantConfig& q, Module& model, int64_t epoch0) {
  if (!q.enabled) return;
  if (q.freeze_bn_epoch > 0 && epoch0 + 1 >= q.freeze_bn_epoch) quant::freeze_bn_stats(model);
  if (q.observer_off_epoch > 0 && epoch0 + 1 >= q.observer_off_epoch) quant::disable_observers(model);
}

// "int8": {layer: {clip_dw, clip_dx (latest), distance_dw, distance_dx,
// lr_scale (epoch means)}, ...}; empty without INT8 layers.
// A JSON string's body: quotes, backslashes and control characters escaped.
std::string json_escape(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
      out += b;
    } else {
      out += ch;
    }
  }
  return out;
}

std::string int8_metrics_json(const std::vector<quant::Int8Layer>& layers) {
  if (layers.empty()) return "";
  auto num = [](double v, bool measured) {
    if (!measured) return std::string("null");  // no step of the epoch measured it
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  std::string j = "\"int8\": {";
  for (size_t i = 0; i < layers.size(); ++i) {
    const quant::Int8GradState& st = *layers[i].state;
    const quant::Int8GradState::Means m = layers[i].state->take_means();
    // (appended piece by piece: GCC 12 warns falsely on "literal" + std::string)
    for (const std::string& piece :
         {std::string(i ? ", \"" : "\""), json_escape(layers[i].name), std::string("\": {\"clip_dw\": "),
          num(st.clip(0), true), std::string(", \"clip_dx\": "), num(st.clip(1), true),
          std::string(", \"distance_dw\": "), num(m.distance_dw, m.count_dw > 0), std::string(", \"distance_dx\": "),
          num(m.distance_dx, m.count_dx > 0), std::string(", \"lr_scale\": "), num(m.lr_scale, m.count_dw > 0),
          std::string("}")})
      j += piece;
  }
  return j + "}";
}


// Validation after an epoch's training. When it fails (a corrupt image in
// the validation set, a full disk under data.cache), `save` keeps the
// trained epoch in last.safetensors, its step at the epoch's end, so that
// --resume goes straight to validating it again. Data-parallel, every
// process gets here together (evaluate agrees on a failure through a
// collective): process 0 saves, the others wait for it.
EvalSummary validate_or_save(Module& model, data::DataLoader& val_loader, const ExperimentConfig& cfg, Device device,
                             const std::function<bool()>& save) {
  try {
    return evaluate(model, val_loader, cfg.model.num_classes, device);
  } catch (const Error& e) {
    std::string message = e.what();
    try {
      if (save())
        message += "\n(validation failed after the epoch's training; saved it in " + cfg.output.dir +
                   "/last.safetensors: fix the data and resume with --resume " + cfg.output.dir + ")";
    } catch (const Error& s) {
      message += std::string("\n(validation failed after the epoch's training, and saving it failed too: ") + s.what() +
                 ")";
    }
    if (Collective* all = collective()) {
      double saved = 0;  // a barrier: no process stops while process 0 still writes
      all->sum(&saved, 1);
      throw AgreedError(message);
    }
    throw Error(message);
  }
}


// train.overlap_allreduce: auto overlaps when this process's share of the
// cores leaves one free for its communication thread.
bool wants_overlap(OverlapPolicy p) {
  if (p != OverlapPolicy::auto_) return p == OverlapPolicy::on;
  // This process's share of the cores: those it is bound to when the
  // launcher bound it to fewer than the machine has, else the machine's
  // divided among the processes on it.
  const int64_t machine = std::max(1u, std::thread::hardware_concurrency());
  int64_t share = machine / local_world_size();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < machine) share = CPU_COUNT(&set);
  return num_threads() + 1 <= share;
}

// What a data-parallel run cannot do yet, refused before anything starts.
void check_data_parallel(const ExperimentConfig& cfg, int ranks) {
  if (ranks <= 1) return;
  QAT_CHECK(cfg.train.device == Device::cpu, "train: train.device: ", device_name(cfg.train.device),
            " does not run on several processes yet (the gradient sums are on host memory); use train.device: cpu");
  QAT_CHECK(cfg.data.on_bad_image != BadImagePolicy::skip, "train: data.on_bad_image: skip does not run on several "
            "processes (a process whose part of a batch is all bad would fall out of step); use error");
  QAT_CHECK(cfg.train.batch_size >= ranks, "train: train.batch_size ", cfg.train.batch_size, " is smaller than the ",
            ranks, " processes; each needs at least one image of every batch");
}

}  // namespace

data::TransformSpec transform_spec(const DataConfig& d) {
  data::TransformSpec s;
  s.image_size = d.image_size;
  s.resize = d.resize;
  s.random_crop = d.augment.random_crop;
  s.padding = d.augment.padding;
  s.random_resized_crop = d.augment.random_resized_crop;
  s.scale = {d.augment.scale[0], d.augment.scale[1]};
  s.ratio = {d.augment.ratio[0], d.augment.ratio[1]};
  s.hflip = d.augment.hflip;
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = static_cast<float>(d.mean[c]);
    s.std[c] = static_cast<float>(d.std[c]);
  }
  return s;
}

data::ImageFolder image_folder(const DataConfig& d, const std::string& root) {
  const char* key = root == d.train ? "data.train" : root == d.val ? "data.val" : "";
  return data::ImageFolder(root, d.on_bad_image == BadImagePolicy::skip,
                           data::DecodeLimits{d.max_image_pixels, d.max_aspect_ratio}, key);
}


data::LoaderOptions loader_options(const ExperimentConfig& cfg, bool train) {
  data::LoaderOptions o;
  o.batch_size = cfg.train.batch_size;
  o.shuffle = train;
  o.drop_last = train;
  o.workers = cfg.data.workers;
  o.prefetch = cfg.data.prefetch;
  o.cache = cfg.data.cache;
  o.train = train;
  o.seed = cfg.train.seed + (train ? 0 : 1);
  return o;
}

// Each quant.int8_training.keep_float entry names a quantized layer of the
// prepared model; an error names the config file and the list's line (or the
// --set that gave it) and the layers there are.
void check_keep_float(const ExperimentConfig& cfg, Module& model) {
  std::vector<std::string> layers;
  for (auto& [name, m] : model.named_modules())
    if (dynamic_cast<quant::QatConv2d*>(m) || dynamic_cast<quant::QatLinear*>(m)) layers.push_back(name);
  for (const std::string& k : cfg.quant.int8_training.keep_float) {
    if (std::find(layers.begin(), layers.end(), k) != layers.end()) continue;
    std::string where = "config " + cfg.source_path;
    if (std::filesystem::exists(cfg.source_path)) {
      std::optional<YamlValue> v = load_yaml_file(cfg.source_path).find("quant");
      if (v) v = v->find("int8_training");
      if (v) v = v->find("keep_float");
      where = v ? v->where() : where + " (set by --set)";
    }
    std::string list;
    for (const auto& l : layers) list += (list.empty() ? "" : ", ") + l;
    QAT_FAIL(where, ": quant.int8_training.keep_float: '", k, "' is not a quantized layer of ", cfg.model.name,
             "; its quantized layers: ", list);
  }
}

// Builds the model of a config: the float model, optionally started from a
// float checkpoint (quant.init_from), then prepared for QAT when quant is on.
ModulePtr build_model(const ExperimentConfig& cfg, bool load_init, bool print) {
  ModulePtr model = make_configured_model(cfg.model, cfg.train.seed);
  if (!cfg.quant.enabled) return model;
  // A `qat calibrate` checkpoint (metadata "calibrator") is a prepared model:
  // it is read after prepare(), below.
  Metadata init_meta;
  if (load_init && !cfg.quant.init_from.empty()) {
    init_meta = check_checkpoint_identity(
        cfg.quant.init_from, cfg, {CheckpointKind::float_model, CheckpointKind::calibrated}, "quant.init_from",
        "QAT starts from a float model (an FP32 run's best.safetensors) or a calibration; to continue a QAT run, use "
        "--resume on its folder");
  }
  const bool from_calibration = init_meta.count("calibrator") > 0;
  if (load_init && !cfg.quant.init_from.empty() && !from_calibration) {
    load_model_checked(cfg.quant.init_from, *model, nullptr);
    if (print) std::printf("initialised from %s\n", cfg.quant.init_from.c_str());
  }
  const quant::Backend backend = configured_backend(cfg);
  const quant::PrepareReport report = prepare_as_configured(*model, backend, make_qconfig(cfg.quant), cfg);
  if (from_calibration) {
    ModulePtr calibrated = make_configured_model(cfg.model, cfg.train.seed);
    const quant::PrepareReport cal_report =
        prepare_as_configured(*calibrated, backend, quant::calibration_qconfig(make_qconfig(cfg.quant)), cfg);
    // Scales calibrated for other grids (bits, backend, overrides) would be applied wrongly: refuse them.
    const auto prepared = init_meta.find("prepared");
    QAT_CHECK(prepared == init_meta.end() || prepared->second == cal_report.to_string(), "quant.init_from ",
              cfg.quant.init_from, " was calibrated for other quantization than this config's (quant: backend, bits, "
              "overrides);\nit was calibrated for:\n", prepared == init_meta.end() ? "" : prepared->second,
              "this config prepares:\n", cal_report.to_string());
    load_model_checked(cfg.quant.init_from, *calibrated, nullptr);
    const int64_t n = quant::start_from_calibration(*model, *calibrated);
    if (print)
      std::printf("initialised from the calibration %s: weights, and %lld activation quantizers from its scales\n",
                  cfg.quant.init_from.c_str(), static_cast<long long>(n));
  }
  if (print) std::printf("backend %s, method %s\n%s", backend.name.c_str(), quant::method_name(cfg.quant.method),
                         report.to_string().c_str());
  const char* eval_adds = dynamic_cast<Graph*>(model.get()) ? " and the quantized adds" : "";  // Note [integer eval]
  const Int8TrainingConfig& i8 = cfg.quant.int8_training;
  if (i8.enabled) {
    check_keep_float(cfg, *model);
    const auto layers = quant::enable_int8_training(*model, i8.grad, i8.keep_float, cfg.train.seed,
                                                   quant::make_integer_eval, quant::make_add_eval);
    if (print) {
      std::printf("INT8 training (%s) on %zu layers:", layers.front().state->describe().c_str(), layers.size());
      for (const auto& l : layers) std::printf(" %s", l.name.c_str());
      std::printf("\nin eval, those layers%s run as the integer model's (Note [integer eval])\n", eval_adds);
    }
  }
  if (cfg.quant.integer_forward) {
    const auto layers = quant::enable_integer_forward(*model, quant::make_integer_eval, quant::make_add_eval);
    if (print) {
      std::printf("integer forward on:");
      for (const auto& l : layers)
        if (l.float_because.empty()) std::printf(" %s", l.name.c_str());
      for (const auto& l : layers)
        if (!l.float_because.empty()) std::printf("; %s float (%s)", l.name.c_str(), l.float_because.c_str());
      std::printf("\nin eval, those layers%s run as the integer model's (Note [integer eval])\n", eval_adds);
    }
  }
  return model;
}

namespace {

// What one training run holds, built step by step by run_train's steps
// below, in the order the checks must come (Note [training device] before
// the run directory, the directory before the data, the data before the
// model). Never copied or moved: the loaders keep references to the sets.
struct TrainRun {
  explicit TrainRun(const TrainArgs& a) : args(a) {}
  TrainRun(const TrainRun&) = delete;
  TrainRun& operator=(const TrainRun&) = delete;

  const TrainArgs& args;
  ExperimentConfig cfg;
  Device device = Device::cpu;
  std::string run_dir;
  Collective* all = nullptr;  // data-parallel (mpirun): rank 0 alone writes the run directory and prints
  int rank = 0, ranks = 1;
  bool lead = true, overlap = false;
  std::optional<RunLock> lock;
  std::optional<InterruptScope> interrupts;  // from lock_run_dir on, Ctrl-C / SIGTERM end the run cleanly
  std::optional<data::ImageFolder> train_set, val_set;
  std::optional<data::DataLoader> train_loader, val_loader;
  int64_t steps_per_epoch = 0;
  ModulePtr model;
  std::unique_ptr<Optimizer> optimizer;
  std::optional<LrSchedule> schedule;
  RunState state;
  std::vector<quant::Int8Layer> int8;
  std::vector<std::pair<Tensor, std::shared_ptr<quant::Int8GradState>>> int8_lr_params;
  std::vector<Generator*> dropout_generators;
  std::optional<GradientBuckets> buckets;  // data-parallel: gradients summed while backward runs
  int64_t steps_this_run = 0;
  bool resuming() const { return !args.resume_dir.empty(); }
};

// An epoch's clock: speed and data-wait figures cover the steps this process trains.
struct EpochClock {
  std::chrono::steady_clock::time_point t0;
  double wait0 = 0, allreduce_seconds = 0;
  int64_t first_step = 0, images = 0;
};

// The config, the device and the processes.
void load_run_config(TrainRun& run) {
  const TrainArgs& args = run.args;
  std::vector<std::string> overrides = args.overrides;
  if (!args.device.empty()) overrides.push_back("train.device=" + args.device);
  run.cfg = load_config(args.config, overrides);
  const ExperimentConfig& cfg = run.cfg;
  QAT_CHECK(cfg.sweep.empty() || args.sweep_member, "train: ", args.config, " has a sweep: section (lists of values "
            "for keys); run it with `qat sweep ", args.config, "`, or remove the section to train one config");
  // Note [training device]: before the run directory is touched.
  run.device = cfg.train.device;
  check_training_device(run.device, training_step_of(cfg));
  if (run.resuming()) run.cfg.output.dir = args.resume_dir;
  run.run_dir = cfg.output.dir;
  set_num_threads(static_cast<int>(cfg.train.threads));
  run.all = collective();
  run.rank = run.all ? run.all->rank() : 0, run.ranks = run.all ? run.all->size() : 1;
  run.lead = run.rank == 0;
  check_on_every_process([&] { check_data_parallel(cfg, run.ranks); });  // Note [checks every process makes]
  set_sync_batch_norm(cfg.train.sync_bn);
  run.overlap = run.ranks > 1 && mpi_use_communication_thread(wants_overlap(cfg.train.overlap_allreduce));
}

// The run directory before the data: its problems are reported at once.
void lock_run_dir(TrainRun& run) {
  if (run.resuming()) check_resumable(run.run_dir);  // (before the lock: a folder that is no run gets no .lock)
  if (!run.lead) return;
  const bool made = make_run_dir(run.run_dir);
  // Refused before the lock too, so that a folder that is not a run gets no .lock.
  if (!run.resuming()) check_fresh_run_dir(run.run_dir);
  run.lock.emplace(run.run_dir, made);  // before anything in the directory is written (checked again under it)
}

// Every process checks that the others train the same config on the same data.
void check_same_run_everywhere(const TrainRun& run) {
  const ExperimentConfig& cfg = run.cfg;
  // Note [same run everywhere]; the data folders may lie elsewhere on another node.
  // Section by section, so that the error names the one that differs.
  for (const auto& [section, hash] : config_section_hashes(cfg))
    check_same_everywhere(*run.all,
                          detail::cat("the config's ", section, ": section (data folders, data.workers, ",
                                      "data.prefetch, data.cache, output.dir, train.threads, train.device and ",
                                      "train.overlap_allreduce may differ)"),
                          detail::cat(section, ": hash ", hash));
  check_same_everywhere(*run.all, detail::cat("the training set (", cfg.data.train, ")"),
                        dataset_fingerprint(*run.train_set));
  check_same_everywhere(*run.all, detail::cat("the validation set (", cfg.data.val, ")"),
                        dataset_fingerprint(*run.val_set));
}

// The two image folders and their loaders (this process's shard).
void open_data(TrainRun& run) {
  const ExperimentConfig& cfg = run.cfg;
  const data::ImageFolder& train_set = run.train_set.emplace(image_folder(cfg.data, cfg.data.train));
  const data::ImageFolder& val_set = run.val_set.emplace(image_folder(cfg.data, cfg.data.val));
  QAT_CHECK(static_cast<int64_t>(train_set.classes().size()) == cfg.model.num_classes, "config ", cfg.source_path,
            ": model.num_classes is ", cfg.model.num_classes, " but ", cfg.data.train, " has ",
            train_set.classes().size(), " class folders");
  QAT_CHECK(val_set.classes() == train_set.classes(), "config ", cfg.source_path, ": the class folders of ",
            cfg.data.val, " differ from those of ", cfg.data.train, " (",
            class_folders_difference(train_set.classes(), val_set.classes()), ")");
  if (run.all) check_same_run_everywhere(run);
  const data::TransformSpec spec = transform_spec(cfg.data);
  // Note [cache size]: both splits' caches are resident together.
  if (cfg.data.cache)
    data::check_cache_fits(train_set.size() + val_set.size(), spec, data::memory_limit_bytes(),
                           cfg.data.train + "' and '" + cfg.data.val);
  data::LoaderOptions train_opt = loader_options(cfg, true), val_opt = loader_options(cfg, false);
  train_opt.shard = val_opt.shard = run.rank;
  train_opt.shards = val_opt.shards = run.ranks;
  run.train_loader.emplace(train_set, spec, train_opt);
  run.val_loader.emplace(val_set, spec, val_opt);
  run.steps_per_epoch = run.train_loader->batches_per_epoch();
  if (cfg.train.max_steps_per_epoch > 0)
    run.steps_per_epoch = std::min(run.steps_per_epoch, cfg.train.max_steps_per_epoch);
  QAT_CHECK(run.steps_per_epoch > 0, "train: ", cfg.data.train, " has ", train_set.size(),
            " images, fewer than one batch of ", cfg.train.batch_size);
}

// The model on its device, then its optimizer (whose state then lives there
// too), then the schedule (before any resume: the base learning rates).
void build_training(TrainRun& run) {
  run.model = build_model(run.cfg, !run.resuming(), true);
  run.model->to(run.device);
  run.optimizer = make_optimizer(run.cfg.train, *run.model);
  run.schedule.emplace(schedule_options(run.cfg.train), *run.optimizer);
}

// --resume: the model, optimizer and progress of last.safetensors.
void resume(TrainRun& run) {
  const std::string ckpt = run.run_dir + "/last.safetensors";
  RunState& state = run.state;
  state = load_run_state(ckpt, *run.model, run.optimizer.get(), &run.cfg, ConfigMatch::whole_config);
  if (!state.classes.empty())
    check_same_classes(state.classes, run.train_set->classes(), "train --resume", ckpt, run.cfg.data.train);
  if (run.all)  // Note [same run everywhere]: a node's stale copy of the run
    check_same_everywhere(*run.all, detail::cat("the checkpoint resumed from (", ckpt, ")"),
                          detail::cat("epoch ", state.epoch, " step ", state.step, ", model SHA-256 ",
                                      state.loaded_model_sha256.substr(0, 16), "..."));
  char best[64] = "no validation yet";  // best_top1 -1 printed as "-100.00%"
  if (state.best_top1 >= 0) std::snprintf(best, sizeof best, "best val top-1 %.2f%%", 100 * state.best_top1);
  std::printf("resuming %s at epoch %lld step %lld (%s)\n", run.run_dir.c_str(),
              static_cast<long long>(state.epoch + 1), static_cast<long long>(state.step), best);
}

// The lead process's run directory at the start: no stale temporaries, the
// metrics as the checkpoint left them, the resolved config.
void prepare_run_dir(const TrainRun& run) {
  const std::string& run_dir = run.run_dir;
  remove_stale_temporaries(run_dir);
  // A fresh run starts empty; a resumed one drops the epochs its checkpoint
  // lacks and regains the checkpoint's own epoch (Note [epoch end order]).
  bool restored = false;
  const int64_t dropped = truncate_metrics(run_dir, run.state.epoch, run.state.epoch_rows, &restored);
  if (dropped > 0 && run.resuming())
    std::printf("metrics: dropped %lld row(s) past the checkpoint's epoch %lld (or cut short)\n",
                static_cast<long long>(dropped), static_cast<long long>(run.state.epoch));
  if (restored)
    std::printf("metrics: epoch %lld's rows appended from %s/last.safetensors (the run stopped before writing "
                "them)\n", static_cast<long long>(run.state.epoch), run_dir.c_str());
  if (run.resuming()) restore_best_checkpoint(run_dir, run.state);
  // One experiment: a sweep's combination records its own values, not the lists (qat train refuses those).
  ExperimentConfig resolved = run.cfg;
  resolved.sweep.clear();
  write_text(run_dir + "/config.yaml", config_to_yaml(resolved));
}

void print_run(const TrainRun& run) {
  const ExperimentConfig& cfg = run.cfg;
  std::printf("model %s: %lld parameters; train %lld images, val %lld images, %lld classes; %d threads",
              cfg.model.name.c_str(), static_cast<long long>(run.model->num_parameters()),
              static_cast<long long>(run.train_set->size()), static_cast<long long>(run.val_set->size()),
              static_cast<long long>(run.train_set->classes().size()), num_threads());
  if (run.ranks > 1)
    std::printf(" x %d processes (MPI; batch %lld split %s, batch norm %s, gradient sums %s)", run.ranks,
                static_cast<long long>(cfg.train.batch_size), "across them",
                cfg.train.sync_bn ? "synchronised" : "per process",
                run.overlap ? "started as buckets complete, overlapping backward" : "as buckets complete, blocking");
  std::printf("\n");
  std::printf("run directory: %s\n", run.run_dir.c_str());
}

// What the steps use of the model: its INT8 layers, the parameters their
// learning-rate scale applies to, its dropout generators.
void collect_step_state(TrainRun& run) {
  run.int8 = quant::int8_layers(*run.model);
  for (const quant::Int8Layer& l : run.int8)
    for (const Tensor& p : quant::int8_scaled_parameters(l)) run.int8_lr_params.emplace_back(p, l.state);
  run.dropout_generators = model_generators(*run.model);
}

// Resuming mid-epoch: the order of an epoch is fixed by (seed, epoch), so
// skipping the batches already trained on continues the same sequence.
// (An epoch saved whole before its validation failed skips none: no step is left to train.)
void skip_trained_batches(TrainRun& run, data::Batch& batch) {
  if (run.state.step >= run.steps_per_epoch) return;
  for (int64_t s = 0; s < run.state.step; ++s)
    QAT_CHECK(run.train_loader->next(batch), "resume: epoch shorter than step");
}

// Dropout: every rank but 0 (which keeps the single-process stream, checkpointed)
// draws this step's masks from (seed, rank, epoch, step): ranks never share masks,
// and a resumed run draws the same ones as an uninterrupted run.
void seed_dropout(const TrainRun& run, int64_t epoch, int64_t step) {
  if (run.rank == 0) return;
  for (Generator* g : run.dropout_generators)
    g->manual_seed(data::loader_seed(run.cfg.train.seed, 0x44726f706f7574ULL /* "Dropout" */,
                                     static_cast<uint64_t>(run.rank),
                                     static_cast<uint64_t>(epoch) << 32 | static_cast<uint64_t>(step)));
}

// The step's sums over every process: loss x images, correct, images, and
// whether any process was interrupted.
struct StepSums {
  double v[4];
};

// One optimizer step on `batch`.
StepSums train_step(TrainRun& run, int64_t epoch, int64_t step, const data::Batch& batch, EpochClock& clock) {
  const ExperimentConfig& cfg = run.cfg;
  Optimizer& optimizer = *run.optimizer;
  run.schedule->apply(optimizer, static_cast<double>(epoch) + static_cast<double>(step) / run.steps_per_epoch);
  seed_dropout(run, epoch, step);
  optimizer.zero_grad();
  Tensor logits = run.model->forward(batch.images.to(run.device));
  Tensor loss = cross_entropy(logits, batch.labels.to(run.device), static_cast<float>(cfg.train.label_smoothing));
  const float lv = loss.item();
  QAT_CHECK(std::isfinite(lv), "train: loss is ", lv, " at epoch ", epoch + 1, " step ", step + 1, "; stopping. ",
            checkpoints_left(run.run_dir));
  StepSums sums{{static_cast<double>(lv) * static_cast<double>(batch.labels.size(0)),
                 static_cast<double>(topk_correct(logits.detach().to(Device::cpu), batch.labels, 1)),
                 static_cast<double>(batch.labels.size(0)), g_interrupted ? 1.0 : 0.0}};
  if (run.all) {
    run.all->sum(sums.v, 4);
    // d(global mean loss) = (local images / global images) d(local mean loss); the gradients summed below
    const float share = static_cast<float>(static_cast<double>(batch.labels.size(0)) / sums.v[2]);
    run.buckets->begin_step();
    {
      GradReadyScope overlap([&](TensorImpl* leaf) { run.buckets->ready(leaf); });
      loss.backward(Tensor::from_vector({share}, loss.sizes()));
    }
    clock.allreduce_seconds += run.buckets->finish();
    if (!run.int8.empty()) average_int8_statistics(run.int8, *run.all);
  } else {
    loss.backward();
  }
  for (const auto& [p, state] : run.int8_lr_params)  // error-sensitive learning rates: phi(d) of this step
    run.optimizer->set_lr_scale(p, state->lr_scale());
  optimizer.step();
  if (run.all && !cfg.train.sync_bn) average_batch_norm_statistics(*run.model, *run.all);
  return sums;
}

// Ctrl-C, SIGTERM or --stop-after-steps: last.safetensors at this step.
void save_interrupted(const TrainRun& run, int64_t epoch, int64_t step) {
  require_finite_state(*run.model, run.optimizer.get(), epoch + 1, run.run_dir);
  if (!run.lead) return;
  save_run_state(run.run_dir + "/last.safetensors", *run.model, run.optimizer.get(), run.state, run.cfg);
  // A sweep's combination is resumed by running the sweep again (it resumes unfinished combinations).
  const std::string how = run.args.sweep_member ? "run the same qat sweep again" : "--resume " + run.run_dir;
  std::fprintf(stderr, "qat: interrupted at epoch %lld step %lld; saved %s/last.safetensors (resume with %s)\n",
               static_cast<long long>(epoch + 1), static_cast<long long>(step + 1), run.run_dir.c_str(), how.c_str());
}

// The epoch's remaining steps; false when the run was interrupted (and saved).
bool train_epoch(TrainRun& run, int64_t epoch, EpochClock& clock) {
  const ExperimentConfig& cfg = run.cfg;
  RunState& state = run.state;
  run.model->train();
  apply_quant_schedule(cfg.quant, *run.model, epoch);
  run.buckets.reset();
  if (run.all) run.buckets.emplace(run.model->parameters(), *run.all);
  run.train_loader->start_epoch(epoch);
  Progress progress("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.train.epochs),
                    run.steps_per_epoch, cfg.train.log_every);
  data::Batch batch;
  skip_trained_batches(run, batch);
  clock.first_step = state.step;
  clock.wait0 = run.train_loader->stats().wait_seconds;
  clock.t0 = std::chrono::steady_clock::now();
  for (int64_t step = state.step; step < run.steps_per_epoch; ++step) {
    QAT_CHECK(run.train_loader->next(batch), "train: loader ended after ", step, " of ", run.steps_per_epoch,
              " batches");
    const StepSums sums = train_step(run, epoch, step, batch, clock);
    const int64_t n = static_cast<int64_t>(sums.v[2]);
    state.epoch_loss_sum += sums.v[0];
    state.epoch_correct += static_cast<int64_t>(sums.v[1]);
    state.epoch_images += n;
    clock.images += n;
    state.step = step + 1;
    progress.update(step + 1, state.epoch_loss_sum / state.epoch_images,
                    static_cast<double>(state.epoch_correct) / state.epoch_images, state.epoch_images);
    ++run.steps_this_run;
    if (sums.v[3] > 0 || (run.args.stop_after_steps > 0 && run.steps_this_run >= run.args.stop_after_steps)) {
      progress.finish();
      save_interrupted(run, epoch, step);
      return false;
    }
  }
  progress.finish();
  return true;
}

// quant.bn_reestimation_batches (Note [BN re-estimation]): the running
// statistics recomputed with the weights as the epoch left them, on the
// first batches of that epoch again (its order is fixed by seed and epoch,
// so a resumed run uses the same ones).
void reestimate_bn(TrainRun& run, int64_t epoch) {
  const int64_t want = run.cfg.quant.bn_reestimation_batches;
  if (want <= 0) return;
  run.train_loader->start_epoch(epoch);
  data::Batch batch;
  const int64_t used = quant::reestimate_bn_statistics(*run.model, want, [&](Tensor& images) {
    if (!run.train_loader->next(batch)) return false;
    images = batch.images.to(run.device);
    return true;
  });
  if (run.all && !run.cfg.train.sync_bn) average_batch_norm_statistics(*run.model, *run.all);
  std::printf("  batch-norm statistics re-estimated on %lld training batches (quant.bn_reestimation_batches)\n",
              static_cast<long long>(used));
}

// Validation (saving the trained epoch first if it fails, Note [epoch end
// order]) and the epoch's metrics.
EpochMetrics validate_epoch(TrainRun& run, int64_t epoch, const EpochClock& clock) {
  const double train_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock.t0).count();
  const EvalSummary v = validate_or_save(*run.model, *run.val_loader, run.cfg, run.device, [&] {
    if (!run.lead || !first_non_finite(*run.model, run.optimizer.get()).empty()) return false;
    save_run_state(run.run_dir + "/last.safetensors", *run.model, run.optimizer.get(), run.state, run.cfg);
    return true;
  });
  QAT_CHECK(std::isfinite(v.loss), "train: val loss is ", v.loss, " after epoch ", epoch + 1, "; stopping. ",
            checkpoints_left(run.run_dir));
  require_finite_state(*run.model, run.optimizer.get(), epoch + 1, run.run_dir);
  const RunState& state = run.state;
  EpochMetrics m;
  m.epoch = epoch + 1;
  m.train_loss = state.epoch_loss_sum / state.epoch_images;
  m.train_top1 = static_cast<double>(state.epoch_correct) / state.epoch_images;
  m.val_loss = v.loss, m.val_top1 = v.top1, m.val_top5 = v.top5;
  m.lr = run.optimizer->param_groups()[0].lr;
  m.epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock.t0).count();
  m.images_per_second = clock.images / train_secs;
  m.data_wait_share = (run.train_loader->stats().wait_seconds - clock.wait0) / train_secs;
  m.extra_json = int8_metrics_json(run.int8);
  return m;
}

void print_epoch(const TrainRun& run, const EpochMetrics& m, const EpochClock& clock) {
  std::printf("epoch %lld: train loss %.4f top-1 %.2f%% | val loss %.4f top-1 %.2f%% top-5 %.2f%% | lr %.5f | "
              "%.1f img/s, data wait %.1f%%, %.0f s\n",
              static_cast<long long>(m.epoch), m.train_loss, 100 * m.train_top1, m.val_loss, 100 * m.val_top1,
              100 * m.val_top5, m.lr, m.images_per_second, 100 * m.data_wait_share, m.epoch_seconds);
  const data::DataLoader& train = *run.train_loader;
  const data::DataLoader& val = *run.val_loader;
  const int64_t skipped = train.stats().skipped_images + val.stats().skipped_images;
  if (skipped > 0)
    std::printf("  skipped %lld bad images so far (data.on_bad_image: skip); first: %s\n",
                static_cast<long long>(skipped),
                (train.bad_files().empty() ? val.bad_files() : train.bad_files())[0].c_str());
  if (run.all) {  // the processes must still hold one model (reduce + broadcast make their sums identical)
    TensorMap st = run.model->state_dict();
    for (auto& [k, v] : run.optimizer->state_dict()) st.emplace(k, v);
    check_same_state(st, *run.all, "after epoch " + std::to_string(m.epoch));
    std::printf("  %d processes hold the same model, bit for bit (parameters, buffers, optimizer state)\n",
                run.ranks);
  }
  if (run.ranks > 1 && run.steps_this_run > 0)
    std::printf("  gradient all-reduce on the training thread (not hidden by backward): %.1f ms per step (%d "
                "processes)\n",
                1000.0 * clock.allreduce_seconds /
                    static_cast<double>(std::max<int64_t>(1, run.steps_per_epoch - clock.first_step)),
                run.ranks);
}

// The epoch closed: progress to the next, then (lead) last, best and the
// metrics rows, in Note [epoch end order].
void end_epoch(TrainRun& run, const EpochMetrics& m) {
  RunState& state = run.state;
  state.next_epoch();
  const bool best = m.val_top1 > state.best_top1;
  if (best) state.best_top1 = m.val_top1, state.best_epoch = state.epoch;
  state.epoch_rows = metrics_rows(m);
  if (!run.lead) return;
  const Metadata meta = run_state_metadata(*run.model, run.optimizer.get(), state, run.cfg);  // one digest for both files
  save_checkpoint(run.run_dir + "/last.safetensors", *run.model, run.optimizer.get(), meta);
  if (best) save_checkpoint(run.run_dir + "/best.safetensors", *run.model, run.optimizer.get(), meta);
  append_metrics(run.run_dir, state.epoch_rows);
}

}  // namespace

int run_train(const TrainArgs& args) {
  TrainRun run(args);
  load_run_config(run);
  lock_run_dir(run);
  run.interrupts.emplace();
  if (run.lead && !run.resuming()) check_fresh_run_dir(run.run_dir);
  open_data(run);
  build_training(run);
  if (run.resuming()) resume(run);
  run.state.classes = run.train_set->classes();  // recorded in every checkpoint
  if (run.lead) prepare_run_dir(run);
  print_run(run);
  collect_step_state(run);
  for (int64_t epoch = run.state.epoch; epoch < run.cfg.train.epochs; ++epoch) {
    EpochClock clock;
    if (!train_epoch(run, epoch, clock)) return 130;
    reestimate_bn(run, epoch);
    const EpochMetrics m = validate_epoch(run, epoch, clock);
    print_epoch(run, m, clock);
    end_epoch(run, m);
  }
  std::printf("done: best val top-1 %.2f%%; checkpoints in %s\n", 100 * run.state.best_top1, run.run_dir.c_str());
  return 0;
}

}  // namespace qat::apps
