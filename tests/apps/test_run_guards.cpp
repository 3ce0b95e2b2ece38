// What the commands refuse so that nothing already saved is lost or misread:
// a new run into another run's folder, checkpoints with non-finite weights,
// progress metadata out of range, a checkpoint loaded with other quant
// settings, validation failing after an epoch trained, ONNX and calibrate
// outputs over other files, a sweep over runs of another config.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/test_util.h"

#include "apps/calibrate_cmd.h"
#include "apps/config.h"
#include "apps/integer_cmd.h"
#include "apps/metrics_log.h"
#include "apps/sweep.h"
#include "apps/train.h"
#include "core/safetensors.h"
#include "data/memory_limit.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) { return testing::fresh_temp_dir("qat_guard_", name); }

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A copy of `path` with one metadata value or one model tensor element
// changed. Without keep_digest the metadata's digest is dropped (a file saved
// before it was recorded), so that the checks behind it are reached.
std::string with_metadata(const std::string& path, const std::string& key, const std::string& value,
                          const fs::path& out, bool keep_digest = false) {
  SafetensorsFile f = load_safetensors(path);
  f.metadata[key] = value;
  if (!keep_digest) f.metadata.erase("metadata_sha256");
  save_safetensors(out.string(), f.tensors, f.metadata);
  return out.string();
}

std::string with_element(const std::string& path, const std::string& tensor, int64_t i, float value,
                         const fs::path& out) {
  SafetensorsFile f = load_safetensors(path);
  Tensor t = f.tensors.at(tensor).clone();
  t.data<float>()[i] = value;
  f.tensors[tensor] = t;
  save_safetensors(out.string(), f.tensors, f.metadata);
  return out.string();
}

}  // namespace

TEST_CASE("a new run refuses a folder holding another run's files and leaves them as they were", "[e2e][guard]") {
  const fs::path dir = fresh_dir("fresh");
  const std::string cfg = testing::write_sample_config(dir, "cfg.yaml", "", 1, 2);
  fs::create_directories(dir / "run");
  write_text(dir / "run/best.safetensors", "an earlier run's best");
  write_text(dir / "run/notes.txt", "mine");
  // a log without rows: what a run stopped in epoch 1 leaves
  write_text(dir / "run/metrics.csv", "epoch,train_loss,train_top1,val_loss,val_top1,val_top5,lr,epoch_time_s,"
                                      "images_per_s,data_wait_share\n");
  REQUIRE_THROWS_WITH(run_train({cfg, {}, ""}), Contains(dir.string() + "/run already holds 2 file(s)") &&
                                                    Contains("(best.safetensors, notes.txt)"));
  CHECK(read_text(dir / "run/best.safetensors") == "an earlier run's best");
  CHECK(read_text(dir / "run/notes.txt") == "mine");
  CHECK_FALSE(fs::exists(dir / "run/config.yaml"));
  CHECK_FALSE(fs::exists(dir / "run/.lock"));
  fs::remove(dir / "run/best.safetensors");
  fs::remove(dir / "run/notes.txt");
  // A metrics.jsonl with an epoch in it, or a config.yaml qat did not write, is someone's.
  write_text(dir / "run/metrics.jsonl", "{\"epoch\": 1, \"val_top1\": 0.5}\n");
  write_text(dir / "run/config.yaml", "my: notes\n");
  REQUIRE_THROWS_WITH(run_train({cfg, {}, ""}), Contains("(config.yaml, metrics.csv, metrics.jsonl)"));
  CHECK(read_text(dir / "run/config.yaml") == "my: notes\n");
  fs::remove(dir / "run/metrics.jsonl");
  fs::remove(dir / "run/config.yaml");
  REQUIRE(run_train({cfg, {}, ""}) == 0);
}

// Note [cache size]: the train and val caches are resident together, so
// `qat train` checks them together before any image is decoded.
TEST_CASE("train refuses data.cache when the two splits' caches would not fit, naming both", "[e2e][guard]") {
  const fs::path dir = fresh_dir("cache_fit");
  const std::string cfg = testing::write_sample_config(dir, "cfg.yaml", "", 1, 2, "run");
  const ExperimentConfig c = load_config(cfg);
  // 16384 px: at least 805 MB an image, 322 GB for the sample's 400: beyond half the memory of most machines
  const TrainArgs a{cfg, {"data.cache=true", "data.resize=16384"}, ""};
  if (data::memory_limit_bytes() / 2 >= 400 * uint64_t{16384} * 16384 * 3) {
    WARN("skipped: this machine's memory would hold the sample's images at 16384 px");
    return;
  }
  REQUIRE_THROWS_WITH(run_train(a), Contains("data.cache: true would keep the ") &&
                                        Contains(" images of '" + c.data.train + "' and '" + c.data.val +
                                                 "' in memory at data.resize 16384"));
  CHECK_FALSE(fs::exists(dir / "run/last.safetensors"));
}

// Note [epoch end order]: last.safetensors, then best.safetensors, then the
// epoch's metrics rows. A stop between them leaves last ahead; it carries the
// rows and the best epoch, and --resume completes the others from it.
TEST_CASE("a stop between the end-of-epoch saves loses nothing: resume appends the rows and restores best",
          "[e2e][guard]") {
  const fs::path dir = fresh_dir("epoch_end_order");
  // INT8 training: its metrics.jsonl rows carry members metrics.csv has not (the clips per layer)
  const std::string cfg = testing::write_sample_config(
      dir, "cfg.yaml", "quant:\n  enabled: true\n  int8_training: {enabled: true, keep_float: [fc]}\n", 1, 2, "run");
  const fs::path run = dir / "run";
  REQUIRE(run_train({cfg, {}, ""}) == 0);
  const std::string csv = read_text(run / "metrics.csv"), jsonl = read_text(run / "metrics.jsonl");
  const std::string best = read_text(run / "best.safetensors");
  REQUIRE(best == read_text(run / "last.safetensors"));  // epoch 1, the best: the same model and metadata
  REQUIRE_THAT(jsonl, Contains("\"int8\""));
  SECTION("stopped after last.safetensors: no rows, no best.safetensors") {
    fs::remove(run / "metrics.csv");
    fs::remove(run / "metrics.jsonl");
    fs::remove(run / "best.safetensors");
  }
  SECTION("stopped after best.safetensors: the log's header only") {
    write_text(run / "metrics.csv", csv.substr(0, csv.find('\n') + 1));
    write_text(run / "metrics.jsonl", "");
  }
  SECTION("stopped between the metrics.csv and metrics.jsonl appends") {
    write_text(run / "metrics.jsonl", "");
  }
  SECTION("stopped after last.safetensors, an unreadable best.safetensors there") {
    write_text(run / "best.safetensors", "cut sh");
  }
  SECTION("stopped after last.safetensors, an older best.safetensors there") {
    fs::remove(run / "metrics.csv");
    fs::remove(run / "metrics.jsonl");
    save_safetensors((run / "best.safetensors").string(), {}, {{"epoch", "0"}});
  }
  REQUIRE(run_train({cfg, {}, run.string()}) == 0);
  CHECK(read_text(run / "metrics.csv") == csv);
  CHECK(read_text(run / "metrics.jsonl") == jsonl);
  CHECK(read_text(run / "best.safetensors") == best);
}

// The same experiment on data read from another place (a moved dataset, a
// node's own copy) resumes; another experiment is still refused.
TEST_CASE("resume takes the data from another folder, not another experiment", "[e2e][guard]") {
  const fs::path dir = fresh_dir("moved_data");
  const std::string cfg = testing::write_sample_config(dir, "cfg.yaml", "", 2, 2, "run");
  const fs::path run = dir / "run";
  TrainArgs stop{cfg, {}, ""};
  stop.stop_after_steps = 1;
  REQUIRE(run_train(stop) == 130);
  fs::copy(testing::sample_data_dir(), dir / "moved", fs::copy_options::recursive);
  const std::vector<std::string> moved = {"data.train=" + (dir / "moved/train").string(),
                                          "data.val=" + (dir / "moved/val").string()};
  std::vector<std::string> other = moved;
  other.push_back("train.lr=0.01");
  REQUIRE_THROWS_WITH(run_train({cfg, other, run.string()}), Contains("was trained with config hash"));
  REQUIRE(run_train({cfg, moved, run.string()}) == 0);
  CHECK(read_metrics(run.string()).size() == 2);
}

TEST_CASE("checkpoints with a non-finite or altered weight are refused by eval, export and resume",
          "[e2e][guard]") {
  const fs::path dir = fresh_dir("nonfinite");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const std::string best = (dir / "run/best.safetensors").string();
  REQUIRE_NOTHROW(eval_checkpoint({cfg, {}, best}));
  const std::string nan = with_element(best, "model.fc.weight", 3, std::nanf(""), dir / "nan.safetensors");
  const std::string inf = with_element(best, "model.features.0.bn.running_var", 0,
                                       std::numeric_limits<float>::infinity(), dir / "inf.safetensors");
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {}, nan}),
                      Contains(nan) && Contains("'model.fc.weight' holds nan at element 3"));
  REQUIRE_THROWS_WITH(run_export({cfg, inf, (dir / "export").string(), {}}),
                      Contains(inf) && Contains("'model.features.0.bn.running_var' holds inf at element 0"));
  REQUIRE_FALSE(fs::exists(dir / "export"));
  // A finite but changed weight (a flipped bit): the digest saved with the model says so.
  const float w0 = load_safetensors(best).tensors.at("model.fc.weight").data<float>()[0];
  const std::string flipped = with_element(best, "model.fc.weight", 0, w0 * 4, dir / "flipped.safetensors");
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {}, flipped}),
                      Contains(flipped) && Contains("do not match the digest saved with them") &&
                          Contains("the file is corrupted"));
  fs::copy_file(nan, dir / "run/last.safetensors", fs::copy_options::overwrite_existing);
  const std::string log = read_text(dir / "run/metrics.csv");
  REQUIRE_THROWS_WITH(run_train({cfg, {"train.epochs=3"}, (dir / "run").string()}), Contains("model.fc.weight"));
  CHECK(read_text(dir / "run/metrics.csv") == log);
}

TEST_CASE("progress metadata out of range is refused before the run's metrics are touched", "[e2e][guard]") {
  const fs::path dir = fresh_dir("progress");
  const std::string cfg = testing::write_sample_config(dir, "cfg.yaml", "", 2, 4);
  REQUIRE(run_train({cfg, {}, "", 6}) == 130);  // epoch 1 done, stopped in epoch 2
  const std::string run = (dir / "run").string(), last = run + "/last.safetensors";
  const std::string log = read_text(run + "/metrics.csv");
  REQUIRE(read_metrics(run).size() == 1);
  const std::string kept = (dir / "kept.safetensors").string();
  fs::copy_file(last, kept);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"epoch", "-5"},         {"step", "2x"},          {"best_top1", "5"},        {"best_top1", "nan"},
      {"epoch_correct", "99999"}, {"epoch_loss_sum", "-1"}, {"epoch_images", "1e3"}, {"format", "other"},
      {"epoch", " 1"},         {"epoch_loss_sum", "0x10"}};
  for (const auto& [key, value] : bad) {
    INFO(key << " = " << value);
    with_metadata(kept, key, value, last);
    REQUIRE_THROWS_WITH(run_train({cfg, {}, run}), Contains(last) && Contains("metadata '" + key + "' is '" + value));
    CHECK(read_text(run + "/metrics.csv") == log);
  }
  // In range but changed (epoch 1 -> 2): the metadata's digest says so.
  with_metadata(kept, "epoch", "2", last, true);
  REQUIRE_THROWS_WITH(run_train({cfg, {}, run}),
                      Contains(last) && Contains("the metadata (progress, settings, digests) do not match the digest "
                                                 "saved with them (metadata_sha256 ") &&
                          Contains("the file is corrupted"));
  CHECK(read_text(run + "/metrics.csv") == log);
  // A changed momentum (resume would train on from it): the optimizer's digest says so.
  {
    SafetensorsFile f = load_safetensors(kept);
    std::string momentum;
    for (auto& [name, t] : f.tensors)
      if (name.find(".momentum") != std::string::npos && t.numel() > 0) momentum = name;
    REQUIRE(!momentum.empty());
    Tensor t = f.tensors.at(momentum).clone();
    t.data<float>()[0] += 0.5f;
    f.tensors[momentum] = t;
    save_safetensors(last, f.tensors, f.metadata);
  }
  REQUIRE_THROWS_WITH(run_train({cfg, {}, run}),
                      Contains(last) && Contains("the optimizer's state tensors do not match the digest saved with "
                                                 "them (optimizer_sha256 "));
  CHECK(read_text(run + "/metrics.csv") == log);
  // The same file read without its optimizer (eval, export): refused all the same (docs/guarantees.md).
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {}, last}),
                      Contains(last) && Contains("the optimizer's state tensors do not match the digest"));
  fs::copy_file(kept, last, fs::copy_options::overwrite_existing);
  REQUIRE(run_train({cfg, {}, run}) == 0);
  CHECK(read_metrics(run).size() == 2);
}

TEST_CASE("eval refuses a checkpoint saved with other quantizers, naming each, before loading it", "[e2e][guard]") {
  const fs::path dir = fresh_dir("settings");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true, activation: {bits: 7}}\n");
  const std::string best = (dir / "run/best.safetensors").string();
  REQUIRE_NOTHROW(eval_checkpoint({cfg, {}, best}));
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {"quant.activation.bits=8"}, best}),
                      Contains(best) && Contains("features.0.activation_post_process: uint7 affine per-tensor "
                                                 "(the config: uint8 affine per-tensor)"));
  // Per-tensor weights hold one scale a layer: named, not a shape mismatch.
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {"quant.weight.per_channel=false"}, best}),
                      Contains("features.0.weight_fake_quant: int8 sym per-channel(0) (the config: int8 sym "
                               "per-tensor)"));
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {"quant.overrides={fc: {weight_bits: 4}}"}, best}),
                      Contains("fc.weight_fake_quant: int8 sym per-channel(0) (the config: int4 sym per-channel(0))"));
  // What resolves to the same quantizers, or does not change their meaning, may differ.
  REQUIRE_NOTHROW(eval_checkpoint({cfg, {"quant.weight.symmetric=true", "quant.weight.per_channel=true"}, best}));
  REQUIRE_NOTHROW(eval_checkpoint({cfg, {"quant.method=minmax", "train.batch_size=8"}, best}));
  // A stored zero point off its grid (an edited file, or one saved before
  // the settings were recorded) names the tensor and the file.
  SafetensorsFile f = load_safetensors(best);
  f.metadata.erase("model_sha256");
  f.metadata.erase("metadata_sha256");
  f.tensors["model.features.0.activation_post_process.zero_point"].data<int32_t>()[0] = 300;
  const std::string edited = (dir / "edited.safetensors").string();
  save_safetensors(edited, f.tensors, f.metadata);
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {}, edited}),
                      Contains(edited) && Contains("'model.features.0.activation_post_process.zero_point' holds 300") &&
                          Contains("[0, 127]"));
}

TEST_CASE("a float checkpoint has no quantizers to compare: quant keys of a disabled section do not matter",
          "[e2e][guard]") {
  const fs::path dir = fresh_dir("float");
  const std::string cfg = testing::trained_sample_qat_run(dir, "");
  const std::string best = (dir / "run/best.safetensors").string();
  REQUIRE(load_safetensors_metadata(best).at("quantizers") == "0");
  REQUIRE_NOTHROW(eval_checkpoint({cfg, {"quant.bits=4", "quant.backend=tensorrt"}, best}));
}

TEST_CASE("a validation set that fails after an epoch trained keeps the epoch for --resume", "[e2e][guard]") {
  const fs::path dir = fresh_dir("valfail");
  fs::copy(testing::sample_data_dir() + "/val", dir / "val", fs::copy_options::recursive);
  const fs::path first_class = *fs::directory_iterator(dir / "val");
  const fs::path bad = first_class / "zz_truncated.jpg";
  const std::string jpeg = read_text(*fs::directory_iterator(first_class));
  write_text(bad, jpeg.substr(0, jpeg.size() / 3));
  const std::string cfg = testing::write_sample_config(dir, "cfg.yaml", "", 2, 3);
  const std::vector<std::string> val = {"data.val=" + (dir / "val").string(), "data.cache=false"};
  const std::string run = (dir / "run").string();
  REQUIRE_THROWS_WITH(run_train({cfg, val, ""}), Contains("zz_truncated.jpg") && Contains("saved it in " + run));
  const Metadata m = load_safetensors_metadata(run + "/last.safetensors");
  CHECK(m.at("epoch") == "0");
  CHECK(m.at("step") == "3");
  fs::remove(bad);
  REQUIRE(run_train({cfg, val, run}) == 0);
  const auto rows = read_metrics(run);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].epoch == 1);
}

TEST_CASE("export --format onnx replaces only an earlier .onnx file", "[e2e][guard]") {
  const fs::path dir = fresh_dir("onnx_target");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const std::string best = (dir / "run/best.safetensors").string();
  const std::string before = read_text(best);
  ExportArgs a{cfg, best, best, {}, "onnx"};
  REQUIRE_THROWS_WITH(run_export(a), Contains("is the input " + best));
  CHECK(read_text(best) == before);
  a.out_dir = (dir / "notes.txt").string();
  write_text(a.out_dir, "keep me");
  REQUIRE_THROWS_WITH(run_export(a), Contains("exists and is not a .onnx file"));
  CHECK(read_text(a.out_dir) == "keep me");
  a.out_dir = (dir / "m.onnx").string();
  write_text(a.out_dir, "an older export");
  REQUIRE(run_export(a) == 0);
  CHECK(read_text(a.out_dir) != "an older export");
}

TEST_CASE("calibrate --out refuses a folder holding a training run or an export", "[e2e][guard]") {
  const fs::path dir = fresh_dir("calib_out");
  const std::string fp32 = testing::write_sample_config(dir, "fp32.yaml", "", 1, 2, "fp32");
  REQUIRE(run_train({fp32, {}, ""}) == 0);
  const std::string config_before = read_text(dir / "fp32/config.yaml");
  CalibrateArgs a;
  a.config = testing::write_sample_config(dir, "q.yaml", "quant: {enabled: true}\n", 1, 2, "q");
  a.checkpoint = (dir / "fp32/best.safetensors").string();
  a.images = 16;
  a.out_dir = (dir / "fp32").string();
  REQUIRE_THROWS_WITH(run_calibrate(a), Contains("--out " + a.out_dir + " holds last.safetensors of a training run"));
  CHECK(read_text(dir / "fp32/config.yaml") == config_before);
  CHECK_FALSE(fs::exists(dir / "fp32/calibrated.safetensors"));
  a.out_dir = (dir / "ptq").string();
  REQUIRE(run_calibrate(a) == 0);
  // An export's folder (which `qat export` would then refuse to replace:
  // it holds only its two files and their record): nothing is added to it.
  const fs::path exported = dir / "export";
  const ExportArgs to_export{(dir / "ptq/config.yaml").string(), (dir / "ptq/calibrated.safetensors").string(),
                             exported.string(), {}};
  REQUIRE(run_export(to_export) == 0);
  a.out_dir = exported.string();
  REQUIRE_THROWS_WITH(run_calibrate(a), Contains("calibrate: --out " + a.out_dir +
                                                 " holds manifest.yaml of an export (qat export), not calibrate's "
                                                 "outputs; writing them beside it would mix two kinds of output"));
  CHECK(std::distance(fs::directory_iterator(exported), fs::directory_iterator()) == 3);  // and its record
  REQUIRE(run_export(to_export) == 0);  // still an export
  a.out_dir = (dir / "ptq").string();
  REQUIRE(run_calibrate(a) == 0);  // again into its own outputs (now from its cache)
  a.cache = (dir / "ptq/mine.cache").string();
  REQUIRE(run_calibrate(a) == 0);  // with a cache of its own name kept there
  a.cache = (dir / "ptq/other.cache").string();
  REQUIRE(run_calibrate(a) == 0);  // and another
  // A new cache is not written into an export (the next `qat export` would
  // delete it) nor into a training run.
  a.cache = (exported / "calibration.cache").string();
  REQUIRE_THROWS_WITH(run_calibrate(a), Contains("calibrate: --cache's folder " + exported.string() +
                                                 " holds manifest.yaml of an export (qat export)"));
  CHECK(std::distance(fs::directory_iterator(exported), fs::directory_iterator()) == 3);  // and its record
  a.cache = (dir / "fp32/calibration.cache").string();
  REQUIRE_THROWS_WITH(run_calibrate(a), Contains("calibrate: --cache's folder " + (dir / "fp32").string() +
                                                 " holds last.safetensors of a training run"));
  CHECK_FALSE(fs::exists(dir / "fp32/calibration.cache"));
}

TEST_CASE("a sweep refuses a finished combination trained with another config", "[e2e][guard]") {
  const fs::path dir = fresh_dir("sweep");
  const std::string cfg = testing::write_sample_config(dir, "cfg.yaml", "quant: {enabled: true}\n", 1, 2, "sweep");
  std::ofstream(cfg, std::ios::app) << "sweep: {quant.bits: [8]}\n";
  REQUIRE(run_sweep({cfg, {}, {}}) == 0);
  const std::string log = read_text(dir / "sweep/bits-8/metrics.csv");
  // a combination's config.yaml is one experiment: qat train takes it (here to resume its finished run)
  CHECK(load_config((dir / "sweep/bits-8/config.yaml").string()).sweep.empty());
  REQUIRE(run_train({(dir / "sweep/bits-8/config.yaml").string(), {}, (dir / "sweep/bits-8").string()}) == 0);
  REQUIRE(run_sweep({cfg, {}, {}}) == 0);  // the same config: skipped
  REQUIRE(run_sweep({cfg, {"data.workers=1"}, {}}) == 0);  // how the data is read is not the experiment
  CHECK(read_text(dir / "sweep/bits-8/metrics.csv") == log);
  REQUIRE_THROWS_WITH(run_sweep({cfg, {"train.lr=0.01"}, {}}),
                      Contains(dir.string() + "/sweep/bits-8 holds a run of another experiment"));
  CHECK(read_text(dir / "sweep/bits-8/metrics.csv") == log);
  // A value out of range fails the sweep before any combination trains.
  const std::string bad = testing::write_sample_config(dir, "bad.yaml", "quant: {enabled: true}\n", 1, 2, "bad");
  std::ofstream(bad, std::ios::app) << "sweep: {quant.bits: [4, 9]}\n";
  REQUIRE_THROWS_WITH(run_sweep({bad, {}, {}}), Contains("quant.bits") && Contains("2..8, got 9"));
  CHECK_FALSE(fs::exists(dir / "bad/bits-4"));
}

TEST_CASE("a sweep refuses folder clashes, a wrong baseline and a config every combination fails, before training",
          "[e2e][guard]") {
  const fs::path dir = fresh_dir("sweep_checks");
  const std::string cfg = testing::write_sample_config(dir, "cfg.yaml", "", 1, 1, "s");
  std::ofstream(cfg, std::ios::app) << "sweep: {data.train: [/x/d/x, /x/d_x]}\n";
  REQUIRE_THROWS_WITH(run_sweep({cfg, {}, {}}), Contains("{data.train=/x/d/x} and {data.train=/x/d_x} would both "
                                                         "train in the folder data_train-_x_d_x"));
  const std::string seeds = testing::write_sample_config(dir, "seeds.yaml", "", 1, 1, "seeds");
  std::ofstream(seeds, std::ios::app) << "sweep: {train.seed: [1, 2]}\n";
  fs::create_directories(dir / "notarun");
  REQUIRE_THROWS_WITH(run_sweep({seeds, {}, {(dir / "notarun").string()}}), Contains("has no config.yaml"));
  CHECK_FALSE(fs::exists(dir / "seeds"));
  // Baselines the report would refuse after the sweep: given twice, of other num_classes, or a combination's own run.
  const std::string base = testing::write_sample_config(dir, "base.yaml", "", 1, 1, "base");
  REQUIRE(run_train({base, {}, ""}) == 0);
  const std::string b = (dir / "base").string();
  REQUIRE_THROWS_WITH(run_sweep({seeds, {}, {b, b}}), Contains("are the same run"));
  fs::copy(dir / "base", dir / "base2", fs::copy_options::recursive);
  {
    std::string text = read_text(dir / "base2/config.yaml");
    text.replace(text.find("num_classes: 10"), 15, "num_classes: 2");
    write_text(dir / "base2/config.yaml", text);
  }
  REQUIRE_THROWS_WITH(run_sweep({seeds, {}, {(dir / "base2").string()}}),
                      Contains("has 2 classes but " + seeds + " has 10"));
  fs::create_directories(dir / "seeds");
  fs::copy(dir / "base", dir / "seeds/train_seed-1", fs::copy_options::recursive);
  REQUIRE_THROWS_WITH(run_sweep({seeds, {}, {(dir / "seeds/train_seed-1").string()}}),
                      Contains("is the folder of the sweep's combination train_seed-1"));
  fs::remove_all(dir / "seeds");
  const std::string typo = testing::write_sample_config(
      dir, "typo.yaml", "quant: {enabled: true, overrides: {feature.0: {weight_bits: 8}}}\n", 1, 1, "typo");
  std::ofstream(typo, std::ios::app) << "sweep: {quant.bits: [8, 4]}\n";
  REQUIRE_THROWS_WITH(run_sweep({typo, {}, {}}), Contains("every one of the 2 combinations") &&
                                                     Contains("feature.0"));
  // qat train of a sweep's config would train its base config alone, into the sweep's root
  REQUIRE_THROWS_WITH(run_train({seeds, {}, ""}), Contains("has a sweep: section") && Contains("qat sweep " + seeds));
  CHECK_FALSE(fs::exists(dir / "seeds"));
}

TEST_CASE("eval and export of a checkpoint, and --resume, refuse class folders other than those it trained on",
          "[e2e][guard]") {
  const fs::path dir = fresh_dir("ckpt_classes");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const std::string best = (dir / "run/best.safetensors").string();
  // the same images under other names: c0 .. c9
  for (const char* split : {"train", "val"}) {
    std::vector<fs::path> classes;
    for (const auto& e : fs::directory_iterator(testing::sample_data_dir() + "/" + split)) classes.push_back(e.path());
    std::sort(classes.begin(), classes.end());
    for (size_t i = 0; i < classes.size(); ++i) {
      fs::create_directories(dir / "renamed" / split);
      std::string name = "c";  // (not "c" + to_string: GCC 12 warns falsely, -Wrestrict)
      name += std::to_string(i);
      fs::create_directory_symlink(classes[i], dir / "renamed" / split / name);
    }
  }
  const std::string val = (dir / "renamed/val").string(), train = (dir / "renamed/train").string();
  const std::string first = load_safetensors_metadata(best).at("classes").substr(0, 9);
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {"data.val=" + val}, best}),
                      Contains("eval: " + best + " has class 0 '" + first + "', but " + val + " has 'c0' there"));
  REQUIRE_THROWS_WITH(run_export({cfg, best, (dir / "export").string(), {"data.val=" + val}}),
                      Contains("export: " + best + " has class 0 '" + first + "'"));
  CHECK_FALSE(fs::exists(dir / "export"));
  CHECK(eval_checkpoint({cfg, {}, best}).images == 100);
  // A run whose training folder (same path, same config) now holds other class names.
  fs::create_directory_symlink(testing::sample_data_dir() + "/train", dir / "mytrain");
  fs::create_directory_symlink(testing::sample_data_dir() + "/val", dir / "myval");
  const std::string mine = testing::write_sample_config(dir, "mine.yaml", "", 2, 2, "mine");
  const std::vector<std::string> at_mine = {"data.train=" + (dir / "mytrain").string(),
                                            "data.val=" + (dir / "myval").string()};
  REQUIRE(run_train({mine, at_mine, "", 2}) == 130);
  for (const char* split : {"train", "val"}) {
    fs::remove(dir / ("my" + std::string(split)));
    fs::create_directory_symlink(dir / "renamed" / split, dir / ("my" + std::string(split)));
  }
  REQUIRE_THROWS_WITH(run_train({mine, at_mine, (dir / "mine").string()}),
                      Contains("train --resume: " + (dir / "mine/last.safetensors").string() + " has class 0 '" +
                               first + "', but " + (dir / "mytrain").string() + " has 'c0' there"));
  // An override naming no layer: said of the config's key, naming the file.
  const std::string typo = testing::write_sample_config(
      dir, "typo.yaml", "quant: {enabled: true, overrides: {conv9: {weight_bits: 4, activation_bits: 4}}}\n", 1, 2,
      "typo");
  REQUIRE_THROWS_WITH(run_train({typo, {}, ""}),
                      Contains("config " + typo + ": quant.overrides.conv9: names no quantized layer"));
  CHECK_FALSE(fs::exists(dir / "typo"));  // refused after taking the folder: the folder it made is gone again
  // A new run whose val folders are not its train folders: the message says which.
  const std::string other = testing::write_sample_config(dir, "other.yaml", "", 1, 2, "other");
  REQUIRE_THROWS_WITH(run_train({other, {"data.val=" + val}, ""}),
                      Contains("the class folders of " + val + " differ from those of") &&
                          Contains("(val lacks " + first + ", ") && Contains("val has c0, c1, c2") &&
                          Contains("(10 in all), which train lacks)"));
}

TEST_CASE("eval of an export refuses validation folders whose classes differ from its manifest's", "[e2e][guard]") {
  const fs::path dir = fresh_dir("classes");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const std::string exported = (dir / "export").string();
  REQUIRE(run_export({cfg, (dir / "run/best.safetensors").string(), exported, {}}) == 0);
  fs::copy(testing::sample_data_dir() + "/val", dir / "val", fs::copy_options::recursive);
  std::vector<fs::path> classes;
  for (const auto& e : fs::directory_iterator(dir / "val")) classes.push_back(e.path());
  const fs::path first = *std::min_element(classes.begin(), classes.end());
  const std::string name = first.filename().string();
  fs::rename(first, dir / "val" / "zzz_renamed");
  const std::string val = (dir / "val").string();
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {"data.val=" + val}, exported}),
                      Contains("export " + exported + " has class 0 '" + name + "', but " + val + " has '"));
  fs::rename(dir / "val" / "zzz_renamed", first);
  REQUIRE_NOTHROW(eval_checkpoint({cfg, {"data.val=" + val}, exported}));
}

// --resume takes a training run's folder, and that run's best checkpoint.
TEST_CASE("train --resume refuses a folder that is no run, and a best.safetensors of another run", "[e2e][guard]") {
  const fs::path dir = fresh_dir("resume_what");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const std::string best = (dir / "run" / "best.safetensors").string();
  const fs::path exported = dir / "export";
  REQUIRE(run_export({cfg, best, exported.string(), {}}) == 0);
  const auto listing = [](const fs::path& d) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing(exported);
  REQUIRE_THROWS_WITH(run_train({cfg, {}, exported.string()}),
                      Contains("--resume " + exported.string() + " holds no last.safetensors: it is an export folder"));
  CHECK(listing(exported) == before);  // no .lock left there: a re-export still works
  REQUIRE(run_export({cfg, best, exported.string(), {}}) == 0);
  // Another run's best copied in (another config: another lr).
  const std::string other = testing::write_sample_config(dir, "other.yaml", "", 1, 2, "other", "  lr: 0.05\n");
  REQUIRE(run_train({other, {}, ""}) == 0);
  fs::copy_file(dir / "other" / "best.safetensors", best, fs::copy_options::overwrite_existing);
  REQUIRE_THROWS_WITH(run_train({cfg, {}, (dir / "run").string()}),
                      Contains(best + " is not this run's (config_hash_data_apart ") &&
                          Contains("another run's checkpoint copied in?"));
}
