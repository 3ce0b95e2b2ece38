#include "apps/calibrate_cmd.h"
#include "apps/model_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "apps/backend_config.h"
#include "apps/calibrate_report.h"
#include "apps/calibration_record.h"
#include "apps/config.h"
#include "apps/file_digest.h"
#include "apps/integer_io.h"
#include "apps/output_folder.h"
#include "apps/ptq.h"
#include "apps/report_format.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/file_kind.h"
#include "core/generator.h"
#include "core/text_file.h"
#include "core/threads.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "models/checkpoint.h"
#include "models/models.h"
#include "quant/convert/freeze.h"
#include "quant/observe/calibration_cache.h"
#include "quant/qparams.h"
#include "quant/sim/calibration.h"
#include "quant/sim/prepare.h"

namespace qat::apps {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// --out's files (Note [output folder]): these four, and caches with their records.
constexpr const char* kConfigFile = "config.yaml";
constexpr const char* kCheckpointFile = "calibrated.safetensors";
constexpr const char* kReportTable = "calibrators.md";
constexpr const char* kReportChart = "calibrators.svg";
constexpr const char* kCacheSuffix = ".cache";
const OutputFolderSpec kOutSpec{"calibrate", "--out", {kConfigFile, kCheckpointFile, kReportTable, kReportChart,
                                                       "*.cache", "*.cache.source.yaml"}};


struct Setup {
  ExperimentConfig cfg;
  ModulePtr fp32;   // the float model (eval mode), loaded once
  ModulePtr model;  // prepared for calibration, FP32 weights loaded
  quant::PrepareReport report;
  std::vector<int64_t> indices;
  CalibrationSources sources;
};

std::string out_dir_of(const CalibrateArgs& args, const ExperimentConfig& cfg) {
  return args.out_dir.empty() ? cfg.output.dir + "-ptq" : args.out_dir;
}

// Inputs inside --out would be replaced with the folder; the cache is the
// one input that may live there (a *.cache file, kept in the new folder).
void check_inputs_outside(const CalibrateArgs& args, const std::string& out_dir) {
  for (const auto& [option, path] : {std::pair<const char*, std::string>{"config", args.config},
                                     {"--checkpoint", args.checkpoint}})
    QAT_CHECK(!path_inside(path, out_dir), "calibrate: ", option, " ", path, " lies in --out ", out_dir,
              ", whose files calibrate replaces; copy it elsewhere or choose another --out");
}

Setup set_up(const CalibrateArgs& args) {
  Setup s{load_config(args.config, args.overrides), nullptr, nullptr, {}, {}, {}};
  const ExperimentConfig& cfg = s.cfg;
  // --out holds only calibrate's files: they are replaced whole (Note [output folder]).
  check_out_kind("calibrate", out_dir_of(args, cfg), {OutputKind::training_run, OutputKind::export_model});
  check_inputs_outside(args, out_dir_of(args, cfg));
  QAT_CHECK(cfg.quant.enabled, "calibrate: config ", args.config,
            " has quant.enabled false; the quant: section says what to quantize (backend, bits)");
  QAT_CHECK(args.images > 0, "calibrate: --images must be > 0, got ", args.images);
  set_num_threads(static_cast<int>(cfg.train.threads));
  s.fp32 = make_configured_model(cfg.model, cfg.train.seed);
  check_checkpoint_identity(args.checkpoint, cfg, {CheckpointKind::float_model}, "calibrate --checkpoint",
                            "it starts from a float model: an FP32 training run's best.safetensors");
  load_model_checked(args.checkpoint, *s.fp32, nullptr);
  s.fp32->eval();
  PtqModel p = prepare_for_calibration(cfg, s.fp32->state_dict());
  s.model = p.model;
  s.report = p.report;
  const quant::Backend backend = configured_backend(cfg);
  const data::ImageFolder train = image_folder(cfg.data, cfg.data.train);
  s.indices = balanced_indices(train, args.images, cfg.train.seed);
  std::string image_list = std::to_string(s.indices.size()) + "\n";
  for (int64_t i : s.indices) image_list += fs::relative(train.path(i), train.root()).string() + "\n";
  const DataConfig& d = cfg.data;
  s.sources = {sha256_text(cfg.model.name + "/" + std::to_string(cfg.model.num_classes) + "/" + backend.name + "\n" +
                           s.report.to_string()),
               sha256_file(args.checkpoint),
               sha256_text(std::to_string(d.image_size) + " " + std::to_string(d.resize) + " " +
                           fmt("%.9g", d.mean[0]) + fmt(" %.9g", d.mean[1]) + fmt(" %.9g", d.mean[2]) +
                           fmt(" %.9g", d.std[0]) + fmt(" %.9g", d.std[1]) + fmt(" %.9g", d.std[2])),
               sha256_text(image_list)};
  return s;
}

// observed: the ranges (from the observers, or a cache's record).
void print_thresholds(const std::vector<quant::CalibratedTensor>& tensors, const std::map<std::string, float>& scales,
                      const std::map<std::string, std::pair<float, float>>& observed, quant::Calibrator c) {
  std::printf("%-40s %12s %12s %8s %12s\n", "tensor", "observed max", "threshold", "ratio", "scale");
  for (const auto& t : tensors) {
    const auto [lo, hi] = observed.at(t.name);
    const float amax = std::max(-lo, hi);
    const float thr = scales.at(t.name) * 127.0f;  // the cache's scale is T / 127
    const float s = t.quantizer->qparams().scale.data<float>()[0];
    std::printf("%-40s %12.5g %12.5g %8.3f %12.6g\n", t.name.c_str(), amax, thr, amax > 0 ? thr / amax : 0.f, s);
  }
  std::printf("(calibrator %s; threshold: max |x| kept unclipped; scale: the grid's step)\n",
              quant::calibrator_name(c));
}

// A cache scale (T / 127) no calibrator writes: a threshold T beyond the
// observed max |x| (every calibrator caps it there; an infinite T is
// replaced by the observed range), or a scale below the grid's floor (it
// would be raised to the floor). Either way the cache would not be what runs.
void check_cache_threshold(const std::string& path, const quant::CalibratedTensor& t, float scale,
                           std::pair<float, float> observed) {
  const float floor = quant::scale_floor(t.quantizer->config().spec);
  // (an all-zero activation's threshold is the floor's)
  const float amax = std::max({-observed.first, observed.second, floor * 127.0f}), threshold = scale * 127.0f;
  constexpr float kRounding = 1e-5f;  // T / 127 stored in float, multiplied back
  QAT_CHECK(std::isfinite(threshold) && threshold <= amax * (1 + kRounding), "calibration cache ", path, ": tensor ",
            t.name, " has threshold ", threshold, " (scale ", scale, " x 127), beyond its observed max |x| ", amax,
            " (calibrators cap the threshold there); the cache was edited or is not this calibration's");
  QAT_CHECK(scale >= floor, "calibration cache ", path, ": tensor ", t.name, " has scale ", scale,
            ", below the smallest scale the grid allows (", floor, "); the cache was edited or is not this "
            "calibration's");
}

// Reads a cache that matches this calibration, or fails naming what differs.
std::map<std::string, float> read_matching_cache(const std::string& path, const Setup& s, const CalibrateArgs& args,
                                                 CalibrationRecord& rec) {
  const quant::CalibrationCache cache = quant::read_cache(path);
  const auto tensors = quant::calibrated_tensors(*s.model);
  std::map<std::string, float> scales(cache.scales.begin(), cache.scales.end());
  for (const auto& t : tensors)
    QAT_CHECK(scales.count(t.name), "calibration cache ", path, " does not match the model: it has no line for ",
              t.name, " (the first of the model's ", tensors.size(), " calibrated tensors it lacks)");
  for (const auto& [name, v] : cache.scales) {
    bool known = false;
    for (const auto& t : tensors) known = known || t.name == name;
    QAT_CHECK(known, "calibration cache ", path, " does not match the model: it names tensor ", printable(name),
              ", which the model does not have");
  }
  const std::string rp = record_path(path);
  QAT_CHECK(fs::exists(rp), "calibration cache ", path, " has no source record ", rp,
            "; qat cannot tell whether it is stale (delete the cache to calibrate again)");
  rec = read_record(rp);
  check_sources(rec, s.sources, path);
  for (const auto& t : tensors)
    QAT_CHECK(rec.ranges.count(t.name), "calibration record ", rp, " has no observed range for tensor ", t.name);
  QAT_CHECK(rec.calibrator != quant::Calibrator::percentile || rec.percentile == args.percentile, "calibration cache ",
            path, " holds percentile ", rec.percentile, " scales but --percentile asks for ", args.percentile,
            "; name another --cache to calibrate afresh");
  for (const auto& t : tensors) check_cache_threshold(path, t, scales.at(t.name), rec.ranges.at(t.name));
  QAT_CHECK(rec.calibrator == cache.calibrator, "calibration cache ", path, " says ",
            quant::calibrator_name(cache.calibrator), " but its record ", rp, " says ",
            quant::calibrator_name(rec.calibrator));
  QAT_CHECK(!args.calibrator || *args.calibrator == cache.calibrator, "calibration cache ", path, " holds ",
            quant::calibrator_name(cache.calibrator), " scales but --calibrator asks for ",
            quant::calibrator_name(*args.calibrator), "; name another --cache to calibrate afresh");
  check_record_matches_cache(rec, path);  // last: the checks above say more precisely what is wrong
  return scales;
}

// The calibrated checkpoint and its config, staged in --out's new folder.
void save_outputs(const Setup& s, const OutputFolder& out, const CalibrationRecord& rec, const std::string& fp32) {
  ExperimentConfig cfg = s.cfg;  // what qat eval / export / compare-layers prepare the checkpoint with
  cfg.quant.method = quant::QuantMethod::minmax;
  cfg.quant.init_from.clear();
  cfg.quant.int8_training.enabled = false;
  cfg.output.dir = out.dir();
  write_text_file_atomic(out.staged(kConfigFile), config_to_yaml(cfg));
  save_run_state(out.staged(kCheckpointFile), *s.model, nullptr, RunState{}, cfg,
                 {{"calibrator", quant::calibrator_name(rec.calibrator)},
                  {"prepared", s.report.to_string()},
                  // (qat compare draws QAT from the calibration as continuing this FP32 run)
                  {"calibrated_from", fs::absolute(fp32).lexically_normal().string()}});
}

// The cache, then its record (which holds the cache's digest): a stop in
// between leaves a cache without a record, which is refused when read.
void save_cache(const Setup& s, const std::string& cache_path, CalibrationRecord rec,
                const std::map<std::string, float>& scales) {
  quant::CalibrationCache cache;
  cache.calibrator = rec.calibrator;
  for (const auto& t : quant::calibrated_tensors(*s.model)) cache.scales.emplace_back(t.name, scales.at(t.name));
  quant::write_cache(cache_path, cache);
  rec.cache_sha256 = sha256_file(cache_path);
  write_record(record_path(cache_path), rec);
}

CalibrationRecord record_of(const Setup& s, const CalibrateArgs& args, quant::Calibrator c) {
  CalibrationRecord r;
  r.calibrator = c;
  r.percentile = args.percentile;
  r.images = static_cast<int64_t>(s.indices.size());
  r.sources = s.sources;
  for (const auto& t : quant::calibrated_tensors(*s.model)) r.ranges[t.name] = {t.observed_min(), t.observed_max()};
  return r;
}

// Val top-1/top-5 of the frozen integer model of every calibrator.
void compare_calibrators(Setup& s, const CalibrateArgs& args, const OutputFolder& out, CalibrateReport& rep) {
  const ExperimentConfig& cfg = s.cfg;
  const data::ImageFolder val = image_folder(cfg.data, cfg.data.val);
  data::DataLoader loader(val, transform_spec(cfg.data), loader_options(cfg, false));
  const EvalSummary f = evaluate(*s.fp32, loader, cfg.model.num_classes);
  rep.fp32_top1 = f.top1, rep.fp32_top5 = f.top5;
  std::printf("FP32: val top-1 %.2f%%, top-5 %.2f%% (%lld images)\n", 100 * f.top1, 100 * f.top5,
              static_cast<long long>(f.images));
  const auto tensors = quant::calibrated_tensors(*s.model);
  for (const quant::CalibratorRow& row : quant::kCalibrators) {
    const quant::Calibrator c = row.id;
    const auto t0 = Clock::now();
    const auto scales = quant::choose_scales(tensors, c, {args.percentile, 128});
    const double search = seconds_since(t0);
    quant::apply_calibration(*s.model, scales);
    const quant::IntegerModel im = quant::freeze(*s.model);
    const EvalSummary r =
        evaluate([&](const Tensor& x) { return im.forward(x); }, loader, cfg.model.num_classes);
    rep.results.push_back({c, r.top1, r.top5, rep.collect_seconds + search});
    std::printf("%-10s integer model: val top-1 %.2f%% (%+.2f vs FP32), top-5 %.2f%%; search %.2f s\n",
                quant::calibrator_name(c), 100 * r.top1, 100 * (r.top1 - f.top1), 100 * r.top5, search);
  }
  const QuantConfig& q = cfg.quant;
  std::string title = cfg.model.name + ", " + q.backend + " backend, W" +
                      std::to_string(q.weight.bits > 0 ? q.weight.bits : q.bits) + "A" +
                      std::to_string(q.activation.bits > 0 ? q.activation.bits : q.bits);
  if (!q.overrides.empty()) title += " (" + std::to_string(q.overrides.size()) + " layers overridden)";
  title += ", " + std::to_string(s.indices.size()) + " calibration images";
  write_calibrator_report(rep, title, out.staged(kReportTable), out.staged(kReportChart));
  std::printf("wrote %s/%s and %s/%s\n", rep.out_dir.c_str(), kReportTable, rep.out_dir.c_str(), kReportChart);
}


// Where the cache is read from or written to: inside --out (then staged with
// the folder's other files) or a file of its own elsewhere.
struct CachePlace {
  std::string path;
  bool exists = false;
  bool in_out = false;  // a file of --out's folder: its name, kept or staged there
  std::string name;
};

CachePlace place_cache(const CalibrateArgs& args, const OutputFolder& out) {
  CachePlace c;
  c.path = args.cache.empty() ? out.dir() + "/calibration" + kCacheSuffix : args.cache;
  std::error_code ec;
  c.in_out = out.contains(c.path);
  c.name = fs::path(c.path).filename().string();
  if (c.in_out) {
    QAT_CHECK(fs::weakly_canonical(fs::absolute(c.path), ec).parent_path() == fs::weakly_canonical(out.dir(), ec) &&
                  c.name.size() > std::strlen(kCacheSuffix) && c.name.ends_with(kCacheSuffix),
              "calibrate: --cache ", c.path, " lies in --out ", out.dir(), ", where calibrate writes ", kConfigFile,
              " and ", kCheckpointFile, " (and ", kReportTable, ", ", kReportChart, "): a cache there must be a *",
              kCacheSuffix, " file directly in it; name it so, or put it elsewhere");
    c.exists = out.holds(c.name);
    QAT_CHECK(c.exists || !out.holds(c.name + ".source.yaml"), "calibrate: --out ", out.dir(), " holds ",
              record_path(c.name), " without its cache ", c.name, "; remove the record to calibrate afresh");
    return c;
  }
  c.exists = fs::exists(c.path, ec);
  // Where a new cache would go must exist before any output is written (the cache comes last).
  const fs::path folder = fs::absolute(c.path).parent_path();
  QAT_CHECK(c.exists || fs::is_directory(folder, ec), "calibrate: --cache ", c.path, ": its folder ", folder.string(),
            " does not exist");
  QAT_CHECK(c.exists || !fs::exists(record_path(c.path), ec), "calibrate: --cache ", c.path, " does not exist but ",
            "its record ", record_path(c.path), " does; remove the record to calibrate afresh");
  // A new cache (and its .source.yaml) would be lost with an export folder,
  // which the next `qat export` replaces whole, and would mix into a run.
  if (!c.exists)
    check_out_kind("calibrate", folder.string(),
                   {OutputKind::training_run, OutputKind::export_model, OutputKind::calibration}, "--cache's folder");
  return c;
}

// The old folder's caches that this run does not write go into the new one
// unchanged (each is checked against its own record when it is read).
void keep_old_caches(OutputFolder& out, const CachePlace& cache, bool writes_cache) {
  for (const auto& e : fs::directory_iterator(out.dir())) {
    const std::string name = e.path().filename().string();
    const bool is_cache = name.ends_with(kCacheSuffix) || name.ends_with(std::string(kCacheSuffix) + ".source.yaml");
    const bool rewritten = writes_cache && cache.in_out && (name == cache.name || name == record_path(cache.name));
    if (is_cache && !rewritten) out.keep(name);
  }
}

}  // namespace

int run_calibrate(const CalibrateArgs& args, CalibrateReport* report) {
  QAT_CHECK(!(args.compare && !args.cache.empty()),
            "calibrate: --compare calibrates afresh with every calibrator; it takes no --cache");
  Setup s = set_up(args);
  CalibrateReport rep;
  rep.out_dir = out_dir_of(args, s.cfg);
  OutputFolder out(kOutSpec, rep.out_dir);
  const CachePlace cache = place_cache(args, out);
  const bool from_cache = !args.compare && cache.exists;
  std::printf("calibrate %s: %s, %zu calibration images from %s (balanced across classes, seed %llu)\n",
              args.checkpoint.c_str(), s.cfg.model.name.c_str(), s.indices.size(), s.cfg.data.train.c_str(),
              static_cast<unsigned long long>(s.cfg.train.seed));
  const data::ImageFolder train = image_folder(s.cfg.data, s.cfg.data.train);
  const Tensor x = load_image_set(train, from_cache ? std::vector<int64_t>{s.indices.front()} : s.indices,
                                  transform_spec(s.cfg.data))
                       .images;
  if (from_cache) {  // one image, for the weights' ranges: the activations' come from the cache
    quant::begin_calibration(*s.model);
    rep.collect_seconds = forward_all(*s.model, x, s.cfg.train.batch_size, "calibrate: weights",
                                      [&] { quant::stop_observing_weights(*s.model); });
  } else {
    rep.collect_seconds = calibration_passes(*s.model, x, s.cfg.train.batch_size);
  }
  quant::Calibrator c = args.calibrator.value_or(quant::Calibrator::entropy);
  std::map<std::string, float> scales;
  CalibrationRecord rec;
  if (from_cache) {
    scales = read_matching_cache(cache.path, s, args, rec);
    c = rec.calibrator;
    std::printf("read calibration cache %s (%s): calibration skipped\n", cache.path.c_str(),
                quant::calibrator_name(c));
    quant::apply_calibration(*s.model, scales, rec.ranges);
  } else {
    rep.float_seconds = forward_all(*s.fp32, x, s.cfg.train.batch_size, "fp32 inference");
    std::printf("calibration passes %.2f s, FP32 inference of the same %lld images %.2f s (x%.2f)\n",
                rep.collect_seconds, static_cast<long long>(x.size(0)), rep.float_seconds,
                rep.collect_seconds / std::max(1e-9, rep.float_seconds));
    if (args.compare) compare_calibrators(s, args, out, rep);
    scales = quant::choose_scales(quant::calibrated_tensors(*s.model), c, {args.percentile, 128});
    rec = record_of(s, args, c);
    quant::apply_calibration(*s.model, scales);
  }
  print_thresholds(quant::calibrated_tensors(*s.model), scales, rec.ranges, c);
  save_outputs(s, out, rec, args.checkpoint);
  keep_old_caches(out, cache, !from_cache);
  if (!from_cache && cache.in_out) save_cache(s, out.staged(cache.name), rec, scales);
  out.publish();
  if (!from_cache && !cache.in_out) save_cache(s, cache.path, rec, scales);
  std::printf("wrote %s/%s and %s/%s%s\n", rep.out_dir.c_str(), kCheckpointFile, rep.out_dir.c_str(), kConfigFile,
              from_cache ? "" : (", cache " + cache.path + " (+ .source.yaml)").c_str());
  std::printf("next: qat eval %s/%s --checkpoint %s/%s\n", rep.out_dir.c_str(), kConfigFile, rep.out_dir.c_str(),
              kCheckpointFile);
  if (report) *report = rep;
  return 0;
}

}  // namespace qat::apps
