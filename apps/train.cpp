#include "apps/train.h"

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
#include "models/checkpoint.h"
#include "models/models.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
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

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  QAT_CHECK(f.good(), "cannot write ", path);
  f << text;
  f.flush();
  QAT_CHECK(f.good(), "writing ", path, " failed (disk full?)");
}

void make_run_dir(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  QAT_CHECK(!ec && fs::is_directory(run_dir), "train: output.dir '", run_dir, "' cannot be made a folder",
            ec ? ": " + ec.message() : std::string(" (a file of that name exists)"));
}

// Whether a file holds nothing but white space.
bool blank_file(const std::string& path) {
  std::ifstream in(path);
  char c;
  while (in.get(c))
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  return true;
}

// Whether run_dir's metrics logs hold no epoch (a run that stopped before
// its first one left metrics.csv with its header only, metrics.jsonl empty).
bool no_metrics_rows(const std::string& run_dir) {
  try {
    if (!read_metrics(run_dir).empty()) return false;
  } catch (const Error&) {
    return false;  // malformed: not ours to overwrite
  }
  return blank_file(run_dir + "/metrics.jsonl");
}

// A new run writes into a folder that holds nothing it would overwrite:
// only its lock, temporaries of a killed save, and what a run that stopped
// before its first epoch leaves (its config.yaml, metrics logs without rows).
void check_fresh_run_dir(const std::string& run_dir) {
  QAT_CHECK(!fs::exists(run_dir + "/last.safetensors"), "train: ", run_dir,
            " already holds a run (last.safetensors); resume it with --resume ", run_dir,
            " or choose another output.dir");
  const bool empty_log = no_metrics_rows(run_dir);
  std::vector<std::string> held;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    if (name == ".lock" || name.find(".safetensors.tmp.") != std::string::npos) continue;
    if (name == "config.yaml" && is_resolved_config(e.path().string())) continue;
    if (empty_log && (name == "metrics.csv" || name == "metrics.jsonl" || name == "metrics.csv.tmp" ||
                      name == "metrics.jsonl.tmp"))
      continue;
    held.push_back(name);
  }
  std::sort(held.begin(), held.end());
  std::string list;
  for (size_t i = 0; i < held.size() && i < 4; ++i) list += (i ? ", " : "") + held[i];
  if (held.size() > 4) list += ", ...";
  QAT_CHECK(held.empty(), "train: output.dir ", run_dir, " already holds ", held.size(), " file(s) a new run could ",
            "overwrite or mix with (", list, "); choose an empty or new output.dir, or remove them");
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

// Temporary files of checkpoint saves a killed run left behind
// (<name>.tmp.<tag>, core/safetensors.cpp); the run lock says no save is
// running now.
void remove_stale_temporaries(const std::string& run_dir) {
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.find(".safetensors.tmp.") != std::string::npos) fs::remove(e.path());
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

// Note [epoch end order]. At the end of an epoch the lead process writes
// last.safetensors, then best.safetensors (when the epoch is the best so
// far), then the epoch's rows of metrics.csv and metrics.jsonl, so that a
// row in the log means both checkpoints hold its epoch (qat sweep skips a
// combination whose log is complete). A process stopped in between leaves a
// last.safetensors ahead of the others; it carries its epoch's rows and the
// epoch of the best, so a resume appends the missing rows and, when that
// epoch was the best and best.safetensors is missing or older, copies
// last.safetensors (the same model and metadata) to it. Before this order
// the rows came first: a sweep skipped a run whose last epoch no checkpoint
// held, and a stop during the first save left a folder that could be neither
// resumed nor trained afresh.
namespace {
// The epoch a checkpoint's metadata records; -1 when it cannot be read.
int64_t recorded_epoch(const std::string& path) {
  try {
    const Metadata m = load_safetensors_metadata(path);
    const auto e = m.find("epoch");
    return e == m.end() ? -1 : std::stoll(e->second);
  } catch (const std::exception&) {  // unreadable (cut short, another file): stale either way
    return -1;
  }
}

void restore_best_checkpoint(const std::string& run_dir, const RunState& state) {
  if (state.best_epoch == 0 || state.best_epoch != state.epoch || state.step != 0) return;
  const std::string best = run_dir + "/best.safetensors";
  std::error_code ec;
  if (fs::exists(best, ec) && recorded_epoch(best) >= state.best_epoch) return;  // current (or newer: left alone)
  const std::string tmp = best + ".tmp." + temporary_tag();
  fs::copy_file(run_dir + "/last.safetensors", tmp, fs::copy_options::overwrite_existing, ec);
  const int fd = ec ? -1 : ::open(tmp.c_str(), O_RDONLY);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!ec && !synced) ec = std::error_code(errno, std::generic_category());
  if (!ec) fs::rename(tmp, best, ec);
  if (!ec) sync_parent_folder(best);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    QAT_FAIL("train --resume: cannot copy ", run_dir, "/last.safetensors to ", best, ": ", ec.message());
  }
  std::printf("best.safetensors: copied from last.safetensors (epoch %lld, the best, top-1 %.2f%%; the run stopped "
              "before saving it)\n", static_cast<long long>(state.epoch), 100 * state.best_top1);
}
}  // namespace

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
  ModulePtr model = make_model(cfg.model.name, cfg.model.num_classes, cfg.train.seed);
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
  const std::string config_dir = std::filesystem::path(cfg.source_path).parent_path().string();
  const quant::Backend backend = load_backend(cfg.quant.backend, config_dir.empty() ? "." : config_dir);
  const quant::PrepareReport report = quant::prepare(*model, backend, make_qconfig(cfg.quant));
  if (from_calibration) {
    ModulePtr calibrated = make_model(cfg.model.name, cfg.model.num_classes, cfg.train.seed);
    const quant::PrepareReport cal_report =
        quant::prepare(*calibrated, backend, quant::calibration_qconfig(make_qconfig(cfg.quant)));
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
  const Int8TrainingConfig& i8 = cfg.quant.int8_training;
  if (i8.enabled) {
    check_keep_float(cfg, *model);
    const auto layers = quant::enable_int8_training(*model, i8.grad, i8.keep_float, cfg.train.seed);
    if (print) {
      std::printf("INT8 training (%s) on %zu layers:", layers.front().state->describe().c_str(), layers.size());
      for (const auto& l : layers) std::printf(" %s", l.name.c_str());
      std::printf("\n");
    }
  }
  if (cfg.quant.integer_forward) {
    const auto layers = quant::enable_integer_forward(*model);
    if (print) {
      std::printf("integer forward on:");
      for (const auto& l : layers)
        if (l.float_because.empty()) std::printf(" %s", l.name.c_str());
      for (const auto& l : layers)
        if (!l.float_because.empty()) std::printf("; %s float (%s)", l.name.c_str(), l.float_because.c_str());
      std::printf("\n");
    }
  }
  return model;
}

int run_train(const TrainArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.device.empty()) overrides.push_back("train.device=" + args.device);
  ExperimentConfig cfg = load_config(args.config, overrides);
  QAT_CHECK(cfg.sweep.empty() || args.sweep_member, "train: ", args.config, " has a sweep: section (lists of values "
            "for keys); run it with `qat sweep ", args.config, "`, or remove the section to train one config");
  // Note [training device]: before the run directory is touched.
  const Device device = cfg.train.device;
  check_training_device(device, training_step_of(cfg));
  if (!args.resume_dir.empty()) cfg.output.dir = args.resume_dir;
  const std::string run_dir = cfg.output.dir;
  set_num_threads(static_cast<int>(cfg.train.threads));
  // Data-parallel (mpirun): rank 0 alone writes the run directory and prints.
  Collective* all = collective();
  const int rank = all ? all->rank() : 0, ranks = all ? all->size() : 1;
  const bool lead = rank == 0;
  check_on_every_process([&] { check_data_parallel(cfg, ranks); });  // Note [checks every process makes]
  set_sync_batch_norm(cfg.train.sync_bn);
  const bool overlap = ranks > 1 && mpi_use_communication_thread(wants_overlap(cfg.train.overlap_allreduce));

  // The run directory before the data: its problems are reported at once.
  QAT_CHECK(args.resume_dir.empty() || fs::is_directory(run_dir), "train: --resume ", run_dir,
            ": no such run directory");
  std::optional<RunLock> lock;
  if (lead) {
    make_run_dir(run_dir);
    // Refused before the lock too, so that a folder that is not a run gets no .lock.
    if (args.resume_dir.empty()) check_fresh_run_dir(run_dir);
    lock.emplace(run_dir);  // before anything in the directory is written (checked again under it)
  }
  InterruptScope interrupts;  // from here on Ctrl-C / SIGTERM end the run cleanly
  if (lead && args.resume_dir.empty()) check_fresh_run_dir(run_dir);

  const data::ImageFolder train_set = image_folder(cfg.data, cfg.data.train);
  const data::ImageFolder val_set = image_folder(cfg.data, cfg.data.val);
  QAT_CHECK(static_cast<int64_t>(train_set.classes().size()) == cfg.model.num_classes, "config ", cfg.source_path,
            ": model.num_classes is ", cfg.model.num_classes, " but ", cfg.data.train, " has ",
            train_set.classes().size(), " class folders");
  QAT_CHECK(val_set.classes() == train_set.classes(), "config ", cfg.source_path, ": the class folders of ",
            cfg.data.val, " differ from those of ", cfg.data.train);
  if (all) {  // Note [same run everywhere]; the data folders may lie elsewhere on another node
    // Section by section, so that the error names the one that differs.
    for (const auto& [section, hash] : config_section_hashes(cfg))
      check_same_everywhere(*all,
                            detail::cat("the config's ", section, ": section (data folders, data.workers, ",
                                        "data.prefetch, data.cache, output.dir, train.threads, train.device and ",
                                        "train.overlap_allreduce may differ)"),
                            detail::cat(section, ": hash ", hash));
    check_same_everywhere(*all, detail::cat("the training set (", cfg.data.train, ")"), dataset_fingerprint(train_set));
    check_same_everywhere(*all, detail::cat("the validation set (", cfg.data.val, ")"), dataset_fingerprint(val_set));
  }
  const data::TransformSpec spec = transform_spec(cfg.data);
  // Note [cache size]: both splits' caches are resident together.
  if (cfg.data.cache)
    data::check_cache_fits(train_set.size() + val_set.size(), spec, data::memory_limit_bytes(),
                           cfg.data.train + "' and '" + cfg.data.val);
  data::LoaderOptions train_opt = loader_options(cfg, true), val_opt = loader_options(cfg, false);
  train_opt.shard = val_opt.shard = rank;
  train_opt.shards = val_opt.shards = ranks;
  data::DataLoader train_loader(train_set, spec, train_opt);
  data::DataLoader val_loader(val_set, spec, val_opt);
  int64_t steps_per_epoch = train_loader.batches_per_epoch();
  if (cfg.train.max_steps_per_epoch > 0) steps_per_epoch = std::min(steps_per_epoch, cfg.train.max_steps_per_epoch);
  QAT_CHECK(steps_per_epoch > 0, "train: ", cfg.data.train, " has ", train_set.size(),
            " images, fewer than one batch of ", cfg.train.batch_size);

  ModulePtr model = build_model(cfg, args.resume_dir.empty(), true);
  model->to(device);  // before the optimizer, whose state then lives there too
  auto optimizer = make_optimizer(cfg.train, *model);
  const LrSchedule schedule(schedule_options(cfg.train), *optimizer);  // before any resume: base lrs

  RunState state;
  if (!args.resume_dir.empty()) {
    state = load_run_state(run_dir + "/last.safetensors", *model, optimizer.get(), &cfg, ConfigMatch::whole_config);
    if (!state.classes.empty())
      check_same_classes(state.classes, train_set.classes(), "train --resume", run_dir + "/last.safetensors",
                         cfg.data.train);
    if (all)  // Note [same run everywhere]: a node's stale copy of the run
      check_same_everywhere(*all, detail::cat("the checkpoint resumed from (", run_dir, "/last.safetensors)"),
                            detail::cat("epoch ", state.epoch, " step ", state.step, ", model SHA-256 ",
                                        state.loaded_model_sha256.substr(0, 16), "..."));
    char best[64] = "no validation yet";  // best_top1 -1 printed as "-100.00%"
    if (state.best_top1 >= 0) std::snprintf(best, sizeof best, "best val top-1 %.2f%%", 100 * state.best_top1);
    std::printf("resuming %s at epoch %lld step %lld (%s)\n", run_dir.c_str(), static_cast<long long>(state.epoch + 1),
                static_cast<long long>(state.step), best);
  }
  state.classes = train_set.classes();  // recorded in every checkpoint
  if (lead) {
    remove_stale_temporaries(run_dir);
    // A fresh run starts empty; a resumed one drops the epochs its checkpoint
    // lacks and regains the checkpoint's own epoch (Note [epoch end order]).
    bool restored = false;
    const int64_t dropped =
        truncate_metrics(run_dir, state.epoch, state.epoch_rows, &restored);
    if (dropped > 0 && !args.resume_dir.empty())
      std::printf("metrics: dropped %lld row(s) past the checkpoint's epoch %lld (or cut short)\n",
                  static_cast<long long>(dropped), static_cast<long long>(state.epoch));
    if (restored)
      std::printf("metrics: epoch %lld's rows appended from %s/last.safetensors (the run stopped before writing "
                  "them)\n", static_cast<long long>(state.epoch), run_dir.c_str());
    if (!args.resume_dir.empty()) restore_best_checkpoint(run_dir, state);
    // One experiment: a sweep's combination records its own values, not the lists (qat train refuses those).
    ExperimentConfig resolved = cfg;
    resolved.sweep.clear();
    write_text(run_dir + "/config.yaml", config_to_yaml(resolved));
  }
  std::printf("model %s: %lld parameters; train %lld images, val %lld images, %lld classes; %d threads",
              cfg.model.name.c_str(), static_cast<long long>(model->num_parameters()),
              static_cast<long long>(train_set.size()), static_cast<long long>(val_set.size()),
              static_cast<long long>(train_set.classes().size()), num_threads());
  if (ranks > 1)
    std::printf(" x %d processes (MPI; batch %lld split %s, batch norm %s, gradient sums %s)", ranks,
                static_cast<long long>(cfg.train.batch_size), "across them",
                cfg.train.sync_bn ? "synchronised" : "per process",
                overlap ? "started as buckets complete, overlapping backward" : "as buckets complete, blocking");
  std::printf("\n");
  std::printf("run directory: %s\n", run_dir.c_str());

  const std::vector<quant::Int8Layer> int8 = quant::int8_layers(*model);
  std::vector<std::pair<Tensor, std::shared_ptr<quant::Int8GradState>>> int8_lr_params;
  for (const quant::Int8Layer& l : int8)
    for (const Tensor& p : quant::int8_scaled_parameters(l)) int8_lr_params.emplace_back(p, l.state);
  const std::vector<Generator*> dropout_generators = model_generators(*model);
  int64_t steps_this_run = 0;
  for (int64_t epoch = state.epoch; epoch < cfg.train.epochs; ++epoch) {
    model->train();
    apply_quant_schedule(cfg.quant, *model, epoch);
    std::optional<GradientBuckets> buckets;  // data-parallel: gradients summed while backward runs
    if (all) buckets.emplace(model->parameters(), *all);
    train_loader.start_epoch(epoch);
    Progress progress("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.train.epochs), steps_per_epoch,
                      cfg.train.log_every);
    data::Batch batch;
    // Resuming mid-epoch: the order of an epoch is fixed by (seed, epoch), so
    // skipping the batches already trained on continues the same sequence.
    // (An epoch saved whole before its validation failed skips none: no step is left to train.)
    if (state.step < steps_per_epoch)
      for (int64_t s = 0; s < state.step; ++s) QAT_CHECK(train_loader.next(batch), "resume: epoch shorter than step");
    const int64_t first_step = state.step;
    // Speed and data-wait figures cover the steps this process trains.
    const double wait0 = train_loader.stats().wait_seconds;
    const auto t0 = std::chrono::steady_clock::now();
    int64_t images_this_run = 0;
    double allreduce_seconds = 0;
    for (int64_t step = state.step; step < steps_per_epoch; ++step) {
      QAT_CHECK(train_loader.next(batch), "train: loader ended after ", step, " of ", steps_per_epoch, " batches");
      schedule.apply(*optimizer, static_cast<double>(epoch) + static_cast<double>(step) / steps_per_epoch);
      // Dropout: every rank but 0 (which keeps the single-process stream, checkpointed)
      // draws this step's masks from (seed, rank, epoch, step): ranks never share masks,
      // and a resumed run draws the same ones as an uninterrupted run.
      if (rank > 0)
        for (Generator* g : dropout_generators)
          g->manual_seed(data::loader_seed(cfg.train.seed, 0x44726f706f7574ULL /* "Dropout" */,
                                           static_cast<uint64_t>(rank),
                                           static_cast<uint64_t>(epoch) << 32 | static_cast<uint64_t>(step)));
      optimizer->zero_grad();
      Tensor logits = model->forward(batch.images.to(device));
      Tensor loss = cross_entropy(logits, batch.labels.to(device), static_cast<float>(cfg.train.label_smoothing));
      const float lv = loss.item();
      QAT_CHECK(std::isfinite(lv), "train: loss is ", lv, " at epoch ", epoch + 1, " step ", step + 1, "; stopping. ",
                checkpoints_left(run_dir));
      // The step's loss, correct and images over all processes, and whether any was interrupted.
      double step_sums[4] = {static_cast<double>(lv) * static_cast<double>(batch.labels.size(0)),
                             static_cast<double>(topk_correct(logits.detach().to(Device::cpu), batch.labels, 1)),
                             static_cast<double>(batch.labels.size(0)), g_interrupted ? 1.0 : 0.0};
      if (all) {
        all->sum(step_sums, 4);
        // d(global mean loss) = (local images / global images) d(local mean loss); the gradients summed below
        const float share = static_cast<float>(static_cast<double>(batch.labels.size(0)) / step_sums[2]);
        buckets->begin_step();
        {
          GradReadyScope overlap([&](TensorImpl* leaf) { buckets->ready(leaf); });
          loss.backward(Tensor::from_vector({share}, loss.sizes()));
        }
        allreduce_seconds += buckets->finish();
        if (!int8.empty()) average_int8_statistics(int8, *all);
      } else {
        loss.backward();
      }
      for (const auto& [p, state] : int8_lr_params)  // error-sensitive learning rates: phi(d) of this step
        optimizer->set_lr_scale(p, state->lr_scale());
      optimizer->step();
      if (all && !cfg.train.sync_bn) average_batch_norm_statistics(*model, *all);
      const int64_t n = static_cast<int64_t>(step_sums[2]);
      state.epoch_loss_sum += step_sums[0];
      state.epoch_correct += static_cast<int64_t>(step_sums[1]);
      state.epoch_images += n;
      images_this_run += n;
      state.step = step + 1;
      progress.update(step + 1, state.epoch_loss_sum / state.epoch_images,
                      static_cast<double>(state.epoch_correct) / state.epoch_images, state.epoch_images);
      ++steps_this_run;
      if (step_sums[3] > 0 || (args.stop_after_steps > 0 && steps_this_run >= args.stop_after_steps)) {
        progress.finish();
        require_finite_state(*model, optimizer.get(), epoch + 1, run_dir);
        if (lead) save_run_state(run_dir + "/last.safetensors", *model, optimizer.get(), state, cfg);
        // A sweep's combination is resumed by running the sweep again (it resumes unfinished combinations).
        const std::string how = args.sweep_member ? "run the same qat sweep again" : "--resume " + run_dir;
        if (lead) std::fprintf(stderr, "qat: interrupted at epoch %lld step %lld; saved %s/last.safetensors (resume with "
                     "%s)\n", static_cast<long long>(epoch + 1), static_cast<long long>(step + 1),
                     run_dir.c_str(), how.c_str());
        return 130;
      }
    }
    progress.finish();
    const double train_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EvalSummary v = validate_or_save(*model, val_loader, cfg, device, [&] {
      if (!lead || !first_non_finite(*model, optimizer.get()).empty()) return false;
      save_run_state(run_dir + "/last.safetensors", *model, optimizer.get(), state, cfg);
      return true;
    });
    QAT_CHECK(std::isfinite(v.loss), "train: val loss is ", v.loss, " after epoch ", epoch + 1, "; stopping. ",
              checkpoints_left(run_dir));
    require_finite_state(*model, optimizer.get(), epoch + 1, run_dir);
    EpochMetrics m;
    m.epoch = epoch + 1;
    m.train_loss = state.epoch_loss_sum / state.epoch_images;
    m.train_top1 = static_cast<double>(state.epoch_correct) / state.epoch_images;
    m.val_loss = v.loss, m.val_top1 = v.top1, m.val_top5 = v.top5;
    m.lr = optimizer->param_groups()[0].lr;
    m.epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.images_per_second = images_this_run / train_secs;
    m.data_wait_share = (train_loader.stats().wait_seconds - wait0) / train_secs;
    m.extra_json = int8_metrics_json(int8);
    std::printf("epoch %lld: train loss %.4f top-1 %.2f%% | val loss %.4f top-1 %.2f%% top-5 %.2f%% | lr %.5f | "
                "%.1f img/s, data wait %.1f%%, %.0f s\n",
                static_cast<long long>(m.epoch), m.train_loss, 100 * m.train_top1, m.val_loss, 100 * m.val_top1,
                100 * m.val_top5, m.lr, m.images_per_second, 100 * m.data_wait_share, m.epoch_seconds);
    const int64_t skipped = train_loader.stats().skipped_images + val_loader.stats().skipped_images;
    if (skipped > 0)
      std::printf("  skipped %lld bad images so far (data.on_bad_image: skip); first: %s\n",
                  static_cast<long long>(skipped),
                  (train_loader.bad_files().empty() ? val_loader.bad_files() : train_loader.bad_files())[0].c_str());
    if (all) {  // the processes must still hold one model (reduce + broadcast make their sums identical)
      TensorMap st = model->state_dict();
      for (auto& [k, v] : optimizer->state_dict()) st.emplace(k, v);
      check_same_state(st, *all, "after epoch " + std::to_string(epoch + 1));
      std::printf("  %d processes hold the same model, bit for bit (parameters, buffers, optimizer state)\n", ranks);
    }
    if (ranks > 1 && steps_this_run > 0)
      std::printf("  gradient all-reduce on the training thread (not hidden by backward): %.1f ms per step (%d processes)\n",
                  1000.0 * allreduce_seconds / static_cast<double>(std::max<int64_t>(1, steps_per_epoch - first_step)), ranks);
    state.next_epoch();
    const bool best = v.top1 > state.best_top1;
    if (best) state.best_top1 = v.top1, state.best_epoch = state.epoch;
    state.epoch_rows = metrics_rows(m);
    if (lead) {  // Note [epoch end order]
      const Metadata meta = run_state_metadata(*model, optimizer.get(), state, cfg);  // one digest for both files
      save_checkpoint(run_dir + "/last.safetensors", *model, optimizer.get(), meta);
      if (best) save_checkpoint(run_dir + "/best.safetensors", *model, optimizer.get(), meta);
      append_metrics(run_dir, state.epoch_rows);
    }
  }
  std::printf("done: best val top-1 %.2f%%; checkpoints in %s\n", 100 * state.best_top1, run_dir.c_str());
  return 0;
}

}  // namespace qat::apps
