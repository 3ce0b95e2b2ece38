// End-to-end: `qat train` / `qat eval` on the committed sample data.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tests/test_util.h"

#include "apps/config.h"
#include "apps/integer_cmd.h"
#include "apps/metrics_log.h"
#include "apps/run_lock.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/safetensors.h"
#include "models/models.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kSample = testing::sample_data_dir();

fs::path fresh_dir(const std::string& name) { return testing::fresh_temp_dir("qat_e2e_", name); }

// A small, fast experiment: small_cnn at 32 px, 4 steps of 16 per epoch.
std::string write_config(const fs::path& dir, const std::string& extra_train = "") {
  const std::string path = (dir / "cfg.yaml").string();
  std::ofstream f(path);
  f << "model: {name: small_cnn, num_classes: 10}\n"
    << "data:\n  train: " << kSample << "/train\n  val: " << kSample << "/val\n"
    << "  image_size: 32\n  resize: 36\n  workers: 2\n  cache: true\n"
    << "train:\n  epochs: 2\n  batch_size: 16\n  lr: 0.05\n  seed: 3\n  threads: 1\n  max_steps_per_epoch: 4\n"
    << extra_train << "output: {dir: " << (dir / "run").string() << "}\n";
  return path;
}

// Every element as a double, whatever the dtype (float bits compare exactly:
// float -> double is exact).
std::vector<double> all_values(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<double> v;
  for (int64_t i = 0; i < c.numel(); ++i) switch (c.dtype()) {
      case DType::f32: v.push_back(c.data<float>()[i]); break;
      case DType::i32: v.push_back(c.data<int32_t>()[i]); break;
      case DType::u8: v.push_back(c.data<uint8_t>()[i]); break;
      case DType::i8: v.push_back(c.data<int8_t>()[i]); break;
    }
  return v;
}

}  // namespace

TEST_CASE("qat train writes metrics and loadable checkpoints, eval agrees", "[e2e]") {
  const fs::path dir = fresh_dir("basic");
  const std::string cfg = write_config(dir);
  REQUIRE(run_train({cfg, {}, ""}) == 0);
  const std::string run = (dir / "run").string();
  for (const char* f : {"config.yaml", "metrics.csv", "metrics.jsonl", "last.safetensors", "best.safetensors"})
    REQUIRE(fs::exists(run + "/" + f));
  const auto rows = read_metrics(run);
  REQUIRE(rows.size() == 2);
  REQUIRE(rows[1].epoch == 2);
  REQUIRE(rows[1].val_top5 >= rows[1].val_top1);
  // The resolved config reloads to the same experiment.
  REQUIRE(config_hash(load_config(run + "/config.yaml")) == config_hash(load_config(cfg)));
  // Evaluating `last` reproduces the logged val numbers of the last epoch.
  const EvalSummary e = eval_checkpoint({cfg, {}, run + "/last.safetensors"});
  REQUIRE(e.images == 100);
  REQUIRE(e.top1 == Approx(rows[1].val_top1).margin(1e-6));
  REQUIRE(e.top5 == Approx(rows[1].val_top5).margin(1e-6));
  REQUIRE(e.loss == Approx(rows[1].val_loss).epsilon(1e-5));
}

TEST_CASE("an interrupted run resumes to the same weights as an uninterrupted one", "[e2e]") {
  const fs::path a = fresh_dir("straight"), b = fresh_dir("resumed");
  REQUIRE(run_train({write_config(a), {}, ""}) == 0);
  REQUIRE_THROWS_WITH(run_train({write_config(a), {}, ""}), Contains("already holds a run"));

  // b stops after 6 steps (in the middle of epoch 2, as Ctrl-C would), then resumes.
  const std::string cfg_b = write_config(b);
  TrainArgs stop{cfg_b, {}, ""};
  stop.stop_after_steps = 6;
  REQUIRE(run_train(stop) == 130);
  const std::string run_b = (b / "run").string();
  REQUIRE_THROWS_WITH(run_train({cfg_b, {"train.lr=0.1"}, run_b}), Contains("config hash"));
  REQUIRE(run_train({cfg_b, {"train.threads=1"}, run_b}) == 0);
  const TensorMap ta = testing::checkpoint_model_tensors((a / "run/last.safetensors").string());
  const TensorMap tb = testing::checkpoint_model_tensors(run_b + "/last.safetensors");
  REQUIRE(ta.size() == tb.size());
  for (auto& [k, t] : ta) {
    INFO(k);
    REQUIRE(tb.at(k).to_vector() == t.to_vector());
  }
  REQUIRE(read_metrics(run_b).size() == 2);
}

// lr = 3e38 with one step an epoch: the update leaves the weights infinite
// while the loss that computed it was finite; the run must stop before it
// writes them.
TEST_CASE("non-finite weights never reach a checkpoint", "[e2e]") {
  const fs::path dir = fresh_dir("inf_weights");
  const std::string cfg = write_config(dir, "  momentum: 0\n");
  REQUIRE_THROWS_WITH(run_train({cfg, {"train.lr=3e38", "train.max_steps_per_epoch=1"}, ""}),
                      Contains("val loss is") && Contains("nan after epoch 1") && Contains("No checkpoint was saved"));
  REQUIRE_FALSE(fs::exists(dir / "run/last.safetensors"));
  REQUIRE_FALSE(fs::exists(dir / "run/best.safetensors"));
  REQUIRE(read_metrics((dir / "run").string()).empty());
}

TEST_CASE("first_non_finite names the first weight or optimizer state that is not finite", "[e2e]") {
  auto model = make_model("small_cnn", 10, 0);
  CHECK(first_non_finite(*model, nullptr).empty());
  const auto params = model->named_parameters();
  Tensor w = params.back().second;
  w.data<float>()[w.numel() - 1] = std::numeric_limits<float>::infinity();
  CHECK(first_non_finite(*model, nullptr) == params.back().first);
  w.data<float>()[w.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
  CHECK(first_non_finite(*model, nullptr) == params.back().first);
  w.data<float>()[w.numel() - 1] = 0.f;
  CHECK(first_non_finite(*model, nullptr).empty());
}

TEST_CASE("one qat train per run directory: a second is refused naming the holder", "[e2e]") {
  const fs::path dir = fresh_dir("lock");
  const std::string cfg = write_config(dir);
  fs::create_directories(dir / "run");
  {
    const RunLock held((dir / "run").string());
    const std::string pid = "pid " + std::to_string(::getpid());
    REQUIRE_THROWS_WITH(RunLock((dir / "run").string()), Contains("in use by another qat train") && Contains(pid));
    REQUIRE_THROWS_WITH(run_train({cfg, {}, ""}), Contains((dir / "run").string()) && Contains(pid));
    REQUIRE_FALSE(fs::exists(dir / "run/config.yaml"));  // the refused run wrote nothing
    REQUIRE_FALSE(fs::exists(dir / "run/metrics.csv"));
  }
  REQUIRE(run_train({cfg, {"train.epochs=1"}, ""}) == 0);  // released with its holder
}

namespace {
// Runs `qat train cfg` in a child process, sends it `signals` SIGTERMs once
// its config.yaml exists, and returns its wait status.
int train_and_terminate(const std::string& cfg, const fs::path& run_dir, int signals) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 99;
    try {
      rc = run_train({cfg, {"train.epochs=50"}, ""});
    } catch (...) {
      rc = 98;
    }
    ::_exit(rc);
  }
  for (int i = 0; i < 2000 && !fs::exists(run_dir / "config.yaml"); ++i) ::usleep(5000);
  for (int i = 0; i < signals; ++i) {
    if (i > 0) ::usleep(30000);  // apart: two pending SIGTERMs would merge into one
    ::kill(pid, SIGTERM);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}
}  // namespace

TEST_CASE("SIGTERM saves like Ctrl-C and a second one stops at once", "[e2e]") {
  const fs::path dir = fresh_dir("sigterm");
  const std::string cfg = write_config(dir);
  int status = train_and_terminate(cfg, dir / "run", 1);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 130);
  auto model = make_model("small_cnn", 10, 0);
  const RunState st = load_run_state((dir / "run/last.safetensors").string(), *model, nullptr);
  REQUIRE(st.epoch * 4 + st.step >= 1);  // saved after the step it was in

  // AlexNet-BN: its step and its 450 MB checkpoint each take far longer than
  // the 30 ms between the two signals, so a run that honoured only the first
  // would write last.safetensors; one that stops at the second never does.
  const fs::path dir2 = fresh_dir("sigterm2");
  const std::string big = (dir2 / "cfg.yaml").string();
  std::ofstream(big) << "model: {name: alexnet_bn, num_classes: 10}\n"
                     << "data:\n  train: " << kSample << "/train\n  val: " << kSample << "/val\n"
                     << "  image_size: 64\n  resize: 72\n  workers: 1\n"
                     << "train:\n  epochs: 2\n  batch_size: 8\n  threads: 1\n  max_steps_per_epoch: 4\n"
                     << "output: {dir: " << (dir2 / "run").string() << "}\n";
  status = train_and_terminate(big, dir2 / "run", 2);
  REQUIRE(WIFEXITED(status));  // not killed by the signal: the handler ended it
  REQUIRE(WEXITSTATUS(status) == 130);
  REQUIRE_FALSE(fs::exists(dir2 / "run/last.safetensors"));
}

TEST_CASE("a row cut short in metrics.csv does not block --resume: the checkpoint is the truth", "[e2e]") {
  const fs::path dir = fresh_dir("partial_row");
  const std::string cfg = write_config(dir);
  TrainArgs stop{cfg, {}, ""};
  stop.stop_after_steps = 6;  // epoch 1 done, stopped inside epoch 2
  REQUIRE(run_train(stop) == 130);
  std::ofstream((dir / "run/metrics.csv").string(), std::ios::app) << "2,1.93,0.2";  // a write cut short
  REQUIRE(run_train({cfg, {}, (dir / "run").string()}) == 0);
  const auto rows = read_metrics((dir / "run").string());
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].epoch == 1);
  CHECK(rows[1].epoch == 2);
}

TEST_CASE("a run whose first files cannot be written stops at once, stale save files are removed", "[e2e]") {
  const fs::path dir = fresh_dir("full_disk");
  const std::string cfg = write_config(dir);
  fs::create_directories(dir / "run");
  // The metrics log is written first, through metrics.csv.tmp (what a killed
  // run may leave): every write there fails with ENOSPC.
  fs::create_symlink("/dev/full", dir / "run/metrics.csv.tmp");
  REQUIRE_THROWS_WITH(run_train({cfg, {}, ""}), Contains("metrics.csv") && Contains("disk full"));
  REQUIRE_FALSE(fs::exists(dir / "run/config.yaml"));
  fs::remove(dir / "run/metrics.csv.tmp");
  std::ofstream((dir / "run/last.safetensors.tmp.99999").string()) << "half a checkpoint";
  REQUIRE(run_train({cfg, {"train.epochs=1"}, ""}) == 0);
  REQUIRE_FALSE(fs::exists(dir / "run/last.safetensors.tmp.99999"));
}

TEST_CASE("an output.dir that cannot be a folder is reported before any data is read", "[e2e]") {
  const fs::path dir = fresh_dir("outdir");
  fs::create_directories(dir / "empty_data");  // no class folders: reading it would fail
  std::ofstream((dir / "taken").string()) << "a file, not a folder";
  const std::string path = (dir / "cfg.yaml").string();
  std::ofstream(path) << "model: {name: small_cnn, num_classes: 10}\n"
                      << "data: {train: " << (dir / "empty_data").string() << ", val: "
                      << (dir / "empty_data").string() << "}\n"
                      << "train: {epochs: 1}\noutput: {dir: " << (dir / "taken").string() << "}\n";
  REQUIRE_THROWS_WITH(run_train({path, {}, ""}), Contains("output.dir") && Contains("taken") &&
                                                     Contains("cannot be made a folder"));
  // --resume of a folder that does not exist: an error, and no folder made.
  REQUIRE_THROWS_WITH(run_train({path, {}, (dir / "typo").string()}), Contains("no such run directory"));
  REQUIRE_FALSE(fs::exists(dir / "typo"));
}

// The epoch switches a config drives: from quant.freeze_bn_epoch on the BN
// running statistics stay as they were, from quant.observer_off_epoch on the
// observers' ranges do. Read back from the checkpoints at the end of epoch 1
// (interrupted after its last step) and of epoch 2.
TEST_CASE("quant.freeze_bn_epoch and quant.observer_off_epoch take effect at their epoch", "[e2e]") {
  const fs::path dir = fresh_dir("epoch_switches");
  const std::string cfg = write_config(dir);
  const std::string quant = "quant: {enabled: true, freeze_bn_epoch: 2, observer_off_epoch: 2}\n";
  {
    std::ofstream f(cfg, std::ios::app);
    f << quant;
  }
  TrainArgs first{cfg, {}, ""};
  first.stop_after_steps = 4;  // all of epoch 1
  REQUIRE(run_train(first) == 130);
  const TensorMap after1 = testing::checkpoint_model_tensors((dir / "run/last.safetensors").string());
  REQUIRE(run_train({cfg, {}, (dir / "run").string()}) == 0);
  const TensorMap after2 = testing::checkpoint_model_tensors((dir / "run/last.safetensors").string());
  int bn = 0, observers = 0, weights = 0;
  for (const auto& [name, t] : after1) {
    INFO(name);
    const bool same = t.to(DType::f32).to_vector() == after2.at(name).to(DType::f32).to_vector();
    if (name.find("running_mean") != std::string::npos || name.find("running_var") != std::string::npos) {
      CHECK(same);  // frozen in epoch 2
      ++bn;
    } else if (name.find(".min_val") != std::string::npos || name.find(".max_val") != std::string::npos) {
      CHECK(same);  // observers off in epoch 2
      ++observers;
    } else if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0) {
      weights += !same;  // the weights still train
    }
  }
  CHECK(bn > 0);
  CHECK(observers > 0);
  CHECK(weights > 0);
}

// quant.bn_reestimation_batches (Note [BN re-estimation]): at the epoch's
// end, before validation and the checkpoint, the batch norms' running
// statistics are recomputed and nothing else changes: after one epoch the
// checkpoint equals a run's without it but for every running mean and
// variance.
TEST_CASE("quant.bn_reestimation_batches recomputes the running statistics at the epoch's end, and only them",
          "[e2e]") {
  const fs::path a = fresh_dir("bn_plain"), b = fresh_dir("bn_reestimated");
  REQUIRE(run_train({write_config(a, "quant: {enabled: true}\n"), {"train.epochs=1"}, ""}) == 0);
  REQUIRE(run_train({write_config(b, "quant: {enabled: true, bn_reestimation_batches: 3}\n"), {"train.epochs=1"},
                     ""}) == 0);
  const TensorMap ta = testing::checkpoint_model_tensors((a / "run/last.safetensors").string());
  const TensorMap tb = testing::checkpoint_model_tensors((b / "run/last.safetensors").string());
  REQUIRE(ta.size() == tb.size());
  int stats = 0, others = 0;
  for (const auto& [name, t] : ta) {
    INFO(name);
    const bool same = all_values(t) == all_values(tb.at(name));
    if (name.find("running_mean") != std::string::npos || name.find("running_var") != std::string::npos) {
      CHECK_FALSE(same);
      ++stats;
    } else {
      CHECK(same);
      ++others;
    }
  }
  CHECK(stats == 4);  // two conv+bn layers
  CHECK(others > 0);
}

TEST_CASE("a non-finite loss stops the run and keeps the last good checkpoint", "[e2e]") {
  const fs::path dir = fresh_dir("nan");
  // epoch 1 trains normally; from epoch 2 the step schedule multiplies the lr by 1e30.
  const std::string cfg = write_config(dir, "  schedule: step\n  step_size: 1\n  gamma: 1.0e+30\n");
  REQUIRE_THROWS_WITH(run_train({cfg, {}, ""}), Contains("loss is") && Contains("epoch 2") &&
                                                    Contains("last.safetensors, is unchanged"));
  auto model = make_model("small_cnn", 10, 0);
  const RunState st = load_run_state((dir / "run/last.safetensors").string(), *model, nullptr);
  REQUIRE(st.epoch == 1);
  REQUIRE(read_metrics((dir / "run").string()).size() == 1);
}

// quant.integer_forward end to end: the QAT layers' forward on the integer
// GEMMs trains the sample as float QAT does (the forwards differ by float
// rounding only, which can move a value across a quantizer's rounding
// boundary), and its checkpoint evaluates to the figures the run logged.
TEST_CASE("QAT with the integer forward trains as float QAT does and evaluates to its logged figures",
          "[e2e][intforward]") {
  const fs::path a = fresh_dir("intfwd"), b = fresh_dir("intfwd_float");
  REQUIRE(run_train({write_config(a, "quant: {enabled: true, integer_forward: true}\n"), {}, ""}) == 0);
  REQUIRE(run_train({write_config(b, "quant: {enabled: true}\n"), {}, ""}) == 0);
  const auto ints = read_metrics((a / "run").string()), floats = read_metrics((b / "run").string());
  REQUIRE(ints.size() == 2);
  REQUIRE(floats.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    INFO("epoch " << e + 1 << ": train loss " << ints[e].train_loss << " vs " << floats[e].train_loss);
    CHECK(ints[e].train_loss == Approx(floats[e].train_loss).epsilon(2e-3));
    CHECK(ints[e].val_loss == Approx(floats[e].val_loss).epsilon(2e-3));
  }
  const std::string run = (a / "run").string();
  const EvalSummary e = eval_checkpoint({(a / "cfg.yaml").string(), {}, run + "/last.safetensors"});
  REQUIRE(e.top1 == Approx(ints[1].val_top1).margin(1e-6));
  REQUIRE(e.loss == Approx(ints[1].val_loss).epsilon(1e-5));
}

// INT8 training end to end: the gradient quantizers' state (clips, distances,
// LR scales, the noise clock) is in the checkpoint, so a run interrupted
// mid-epoch resumes to the same weights; metrics.jsonl carries each layer's
// clip values, cosine distances and LR scales.
TEST_CASE("INT8 training resumes bit-exactly and logs its gradient quantizers", "[e2e][int8train]") {
  const std::string quant =
      "quant:\n  enabled: true\n  int8_training: {enabled: true, period: 3, keep_float: [fc]}\n";
  const fs::path a = fresh_dir("int8_straight"), b = fresh_dir("int8_resumed");
  REQUIRE(run_train({write_config(a, quant), {}, ""}) == 0);
  const std::string cfg_b = write_config(b, quant);
  TrainArgs stop{cfg_b, {}, ""};
  stop.stop_after_steps = 6;
  REQUIRE(run_train(stop) == 130);
  const std::string run_b = (b / "run").string();
  REQUIRE(run_train({cfg_b, {}, run_b}) == 0);
  const TensorMap ta = testing::checkpoint_model_tensors((a / "run/last.safetensors").string());
  const TensorMap tb = testing::checkpoint_model_tensors(run_b + "/last.safetensors");
  REQUIRE(ta.count("model.features.4.int8.clip_dw"));
  REQUIRE(testing::int_values(ta.at("model.features.4.int8.steps")) == std::vector<int32_t>{8});
  REQUIRE_FALSE(ta.count("model.fc.int8.clip_dw"));  // kept float
  REQUIRE(ta.size() == tb.size());
  for (auto& [k, t] : ta) {
    INFO(k);
    const Tensor& u = tb.at(k);
    REQUIRE(u.dtype() == t.dtype());
    REQUIRE(u.sizes() == t.sizes());
    REQUIRE(all_values(u) == all_values(t));
  }
  // The per-layer figures of each epoch are those of the straight run (the
  // epoch sums are checkpointed), timing aside.
  auto int8_part = [](const fs::path& run) {
    std::ifstream in((run / "metrics.jsonl").string());
    std::vector<std::string> parts;
    for (std::string l; std::getline(in, l);) parts.push_back(l.substr(l.find("\"int8\"")));
    return parts;
  };
  REQUIRE(int8_part(a / "run").size() == 2);
  REQUIRE(int8_part(a / "run") == int8_part(b / "run"));
  std::ifstream jsonl((a / "run/metrics.jsonl").string());
  std::string line;
  std::getline(jsonl, line);
  REQUIRE_THAT(line, Contains("\"int8\": {\"features.0\": {\"clip_dw\": ") && Contains("\"features.4\"") &&
                         Contains("\"lr_scale\": ") && !Contains("\"fc\""));
  // An INT8-trained model freezes like any QAT model: the integer model agrees
  // with it layer by layer on the 100 sample images.
  LayerComparison cmp;
  REQUIRE(run_compare_layers({write_config(a, quant), (a / "run/last.safetensors").string(), {}, 0}, &cmp) == 0);
  REQUIRE(cmp.images == 100);
  for (const quant::LayerDiff& d : cmp.layers) {
    INFO(d.name << ": " << d.differ << " of " << d.count << " differ, max " << d.max_diff);
    if (!d.logits) CHECK(d.max_diff <= 1);
  }
  REQUIRE(cmp.layers.back().top1_agree >= 99);
}

TEST_CASE("INT8 training config errors name the key", "[e2e][int8train]") {
  const fs::path d = fresh_dir("int8_errors");
  REQUIRE_THROWS_WITH(load_config(write_config(d, "quant: {int8_training: {enabled: true}}\n")),
                      Contains("quant.int8_training.enabled") && Contains("quant.enabled: true"));
  REQUIRE_THROWS_WITH(load_config(write_config(d, "quant: {enabled: true, int8_training: {gradient_bits: 9}}\n")),
                      Contains("quant.int8_training.gradient_bits"));
  REQUIRE_THROWS_WITH(load_config(write_config(d, "quant: {enabled: true, int8_training: {clipping: mse}}\n")),
                      Contains("quant.int8_training.clipping") && Contains("direction_sensitive"));
  REQUIRE_THROWS_WITH(
      run_train({write_config(d, "quant: {enabled: true, int8_training: {enabled: true, keep_float: [fc1]}}\n"), {},
                 ""}),
      Contains("keep_float") && Contains("fc1"));
}
