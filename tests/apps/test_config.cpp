// apps/config: loading, strict validation (key path + line in every error),
// --set overrides, config_to_yaml round trip, config hash.
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps/config.h"
#include "apps/train.h"
#include "quant/sim/int8_training.h"
#include "core/error.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace qat::apps;

namespace {

// A fresh temporary folder with train/ and val/ subfolders, removed at the end.
struct TempDir : qat::testing::TempDir {
  TempDir() : qat::testing::TempDir("qat_config_test_") {
    fs::create_directories(dir / "train");
    fs::create_directories(dir / "val");
  }
  // Writes `text` to dir/name and returns the path.
  std::string write(const std::string& name, const std::string& text) const {
    fs::path p = dir / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

// Minimal valid config (data roots relative to the YAML file's folder).
const char* kMinimal =
    "model:\n"              // line 1
    "  name: alexnet_bn\n"  // line 2
    "data:\n"               // line 3
    "  train: train\n"      // line 4
    "  val: val\n"          // line 5
    "train:\n"              // line 6
    "  epochs: 3\n"         // line 7
    "output:\n"             // line 8
    "  dir: runs/min\n";    // line 9

const char* kFull = R"(# a full config
model:
  name: small_cnn
  num_classes: 7
data:
  train: train
  val: ./val/
  image_size: 64
  resize: 72
  augment:
    random_crop: false
    padding: 4
    random_resized_crop: true
    scale: [0.2, 1.0]
    ratio: [0.5, 2]
    hflip: false
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
  workers: 3
  prefetch: 8
  cache: true
  on_bad_image: skip
train:
  epochs: 12
  batch_size: 16
  optimizer: adamw
  lr: 1e-3
  momentum: 0.5
  nesterov: true
  weight_decay: 0.05
  no_decay_bn_bias: true
  betas: [0.8, 0.99]
  eps: 1.0e-7
  schedule: multistep
  step_size: 4
  milestones: [4, 8]
  gamma: 0.2
  min_lr_factor: 0.01
  warmup_epochs: 1.5
  warmup_start_factor: 0.2
  label_smoothing: 0.1
  seed: 42
  threads: 2
  log_every: 5
  max_steps_per_epoch: 10
output:
  dir: runs/./full/
)";

// kMinimal with the line `line` (1-based) replaced by `text`.
std::string with_line(const std::string& base, int line, const std::string& text) {
  std::string out;
  int n = 1;
  size_t start = 0;
  while (start < base.size()) {
    size_t end = base.find('\n', start);
    std::string l = base.substr(start, end - start);
    out += (n == line ? text : l) + "\n";
    start = end + 1;
    ++n;
  }
  return out;
}

std::string append(const std::string& base, const std::string& text) { return base + text; }

}  // namespace

TEST_CASE("config: a full config loads with every value", "[config]") {
  TempDir t;
  auto path = t.write("exp.yaml", kFull);
  ExperimentConfig c = load_config(path);
  CHECK(c.source_path == path);
  CHECK(c.model.name == "small_cnn");
  CHECK(c.model.num_classes == 7);
  CHECK(fs::path(c.data.train) == fs::absolute(t.dir / "train").lexically_normal());
  CHECK(fs::path(c.data.val) == fs::absolute(t.dir / "val").lexically_normal());
  CHECK(c.data.image_size == 64);
  CHECK(c.data.resize == 72);
  CHECK_FALSE(c.data.augment.random_crop);
  CHECK(c.data.augment.padding == 4);
  CHECK(c.data.augment.random_resized_crop);
  CHECK(c.data.augment.scale == std::vector<double>{0.2, 1.0});
  CHECK(c.data.augment.ratio == std::vector<double>{0.5, 2.0});
  CHECK_FALSE(c.data.augment.hflip);
  CHECK(c.data.mean == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(c.data.std == std::vector<double>{0.25, 0.25, 0.25});
  CHECK(c.data.workers == 3);
  CHECK(c.data.prefetch == 8);
  CHECK(c.data.cache);
  CHECK(c.data.on_bad_image == BadImagePolicy::skip);
  CHECK(c.train.epochs == 12);
  CHECK(c.train.batch_size == 16);
  CHECK(c.train.optimizer == OptimizerKind::adamw);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.momentum == 0.5);
  CHECK(c.train.nesterov);
  CHECK(c.train.weight_decay == 0.05);
  CHECK(c.train.no_decay_bn_bias);
  CHECK(c.train.betas == std::vector<double>{0.8, 0.99});
  CHECK(c.train.eps == 1e-7);
  CHECK(c.train.schedule == qat::LrScheduleKind::multistep);
  CHECK(c.train.step_size == 4);
  CHECK(c.train.milestones == std::vector<int64_t>{4, 8});
  CHECK(c.train.gamma == 0.2);
  CHECK(c.train.min_lr_factor == 0.01);
  CHECK(c.train.warmup_epochs == 1.5);
  CHECK(c.train.warmup_start_factor == 0.2);
  CHECK(c.train.label_smoothing == 0.1);
  CHECK(c.train.seed == 42);
  CHECK(c.train.threads == 2);
  CHECK(c.train.log_every == 5);
  CHECK(c.train.max_steps_per_epoch == 10);
  CHECK(c.output.dir == "runs/full");  // relative to the working directory, normalised
}

TEST_CASE("config: defaults fill in what the file leaves out", "[config]") {
  TempDir t;
  ExperimentConfig c = load_config(t.write("min.yaml", kMinimal));
  ExperimentConfig d;  // the struct's defaults
  CHECK(c.model.name == "alexnet_bn");
  CHECK(c.model.num_classes == d.model.num_classes);
  CHECK(c.data.image_size == d.data.image_size);
  CHECK(c.data.resize == d.data.resize);
  CHECK(c.data.augment.random_crop == d.data.augment.random_crop);
  CHECK(c.data.augment.scale == d.data.augment.scale);
  CHECK(c.data.mean == d.data.mean);
  CHECK(c.data.std == d.data.std);
  CHECK(c.data.on_bad_image == BadImagePolicy::error);
  CHECK(c.train.epochs == 3);
  CHECK(c.train.batch_size == d.train.batch_size);
  CHECK(c.train.optimizer == OptimizerKind::sgd);
  CHECK(c.train.lr == d.train.lr);
  CHECK(c.train.schedule == qat::LrScheduleKind::cosine);
  CHECK(c.train.milestones.empty());
  CHECK(c.train.seed == 0);
  CHECK(c.output.dir == "runs/min");

  // An empty section is allowed and means "all defaults".
  auto p = t.write("null_aug.yaml", with_line(kMinimal, 5, "  val: val\n  augment:"));
  CHECK(load_config(p).data.augment.hflip == d.data.augment.hflip);
}

TEST_CASE("config: unknown keys name the key path and the line", "[config]") {
  TempDir t;
  SECTION("top level") {
    auto p = t.write("a.yaml", append(kMinimal, "optim:\n  lr: 0.1\n"));
    REQUIRE_THROWS_AS(load_config(p), qat::Error);
    REQUIRE_THROWS_WITH(load_config(p), Contains("unknown key 'optim'") && Contains("line 10") && Contains(p));
  }
  SECTION("in a section, with a suggestion") {
    auto p = t.write("b.yaml", with_line(kMinimal, 7, "  epochs: 3\n  lrr: 0.1"));
    REQUIRE_THROWS_WITH(load_config(p),
                        Contains("train.lrr") && Contains("line 8") && Contains("did you mean 'train.lr'"));
  }
  SECTION("nested section") {
    auto p = t.write("c.yaml", with_line(kMinimal, 5, "  val: val\n  augment:\n    hflipp: true"));
    REQUIRE_THROWS_WITH(load_config(p), Contains("data.augment.hflipp") && Contains("line 7") &&
                                            Contains("did you mean 'data.augment.hflip'"));
  }
  SECTION("a key in the wrong section") {
    auto p = t.write("d.yaml", with_line(kMinimal, 7, "  epochs: 3\n  image_size: 64"));
    REQUIRE_THROWS_WITH(load_config(p), Contains("train.image_size") && Contains("line 8") &&
                                            Contains("did you mean 'data.image_size'"));
  }
  SECTION("duplicate key") {
    auto p = t.write("e.yaml", with_line(kMinimal, 7, "  epochs: 3\n  epochs: 4"));
    REQUIRE_THROWS_WITH(load_config(p), Contains("train.epochs") && Contains("line 8") && Contains("duplicate"));
  }
  SECTION("a section that is not a mapping") {
    auto q = t.write("g.yaml", with_line(with_line(kMinimal, 8, "output: runs/x"), 9, ""));
    REQUIRE_THROWS_WITH(load_config(q), Contains("output") && Contains("line 8") && Contains("expected a mapping"));
  }
}

TEST_CASE("config: wrong types name the key path and the line", "[config]") {
  TempDir t;
  auto p1 = t.write("lr.yaml", with_line(kMinimal, 7, "  epochs: 3\n  lr: abc"));
  REQUIRE_THROWS_WITH(load_config(p1), Contains("train.lr: expected a number, got 'abc'") && Contains("line 8"));
  auto p2 = t.write("epochs.yaml", with_line(kMinimal, 7, "  epochs: 3.5"));
  REQUIRE_THROWS_WITH(load_config(p2), Contains("train.epochs: expected an integer, got '3.5'") && Contains("line 7"));
  auto p3 = t.write("bool.yaml", with_line(kMinimal, 5, "  val: val\n  cache: yes"));
  REQUIRE_THROWS_WITH(load_config(p3), Contains("data.cache: expected true or false, got 'yes'") && Contains("line 6"));
  auto p4 = t.write("enum.yaml", with_line(kMinimal, 7, "  epochs: 3\n  optimizer: rmsprop"));
  REQUIRE_THROWS_WITH(load_config(p4), Contains("train.optimizer") && Contains("sgd, adamw") && Contains("line 8"));
  auto p5 = t.write("list.yaml", with_line(kMinimal, 5, "  val: val\n  mean: 0.5"));
  REQUIRE_THROWS_WITH(load_config(p5), Contains("data.mean: expected a list of 3 numbers") && Contains("line 6"));
  auto p6 = t.write("list2.yaml", with_line(kMinimal, 5, "  val: val\n  std: [0.2, 0.2]"));
  REQUIRE_THROWS_WITH(load_config(p6), Contains("data.std") && Contains("got 2 element(s)") && Contains("line 6"));
  auto p7 = t.write("quoted.yaml", with_line(kMinimal, 7, "  epochs: \"3\""));
  REQUIRE_THROWS_WITH(load_config(p7), Contains("train.epochs") && Contains("quoted") && Contains("line 7"));
  auto p8 = t.write("empty.yaml", with_line(kMinimal, 7, "  epochs:"));
  REQUIRE_THROWS_WITH(load_config(p8), Contains("train.epochs") && Contains("nothing") && Contains("line 7"));
  auto p9 = t.write("sched.yaml", with_line(kMinimal, 7, "  epochs: 3\n  schedule: Cosine"));
  REQUIRE_THROWS_WITH(load_config(p9), Contains("train.schedule") && Contains("constant, step, multistep, cosine"));
  auto p10 = t.write("bad.yaml", with_line(kMinimal, 5, "  val: val\n  on_bad_image: ignore"));
  REQUIRE_THROWS_WITH(load_config(p10), Contains("data.on_bad_image") && Contains("error, skip") && Contains("line 6"));
}

TEST_CASE("config: out-of-range values name the key path and the line", "[config]") {
  TempDir t;
  struct Case {
    int line;
    std::string text, expect;
    int err_line;
  };
  std::vector<Case> cases = {
      {7, "  epochs: 0", "train.epochs: must be >= 1, got 0", 7},
      {7, "  epochs: 3\n  batch_size: 0", "train.batch_size: must be >= 1", 8},
      {7, "  epochs: 3\n  lr: 0", "train.lr: must be > 0", 8},
      {7, "  epochs: 3\n  lr: -0.1", "train.lr: must be > 0", 8},
      {7, "  epochs: 3\n  momentum: 1.0", "train.momentum: must be in [0.0, 1.0)", 8},
      {7, "  epochs: 3\n  weight_decay: -1e-4", "train.weight_decay: must be >= 0", 8},
      {7, "  epochs: 3\n  label_smoothing: 1", "train.label_smoothing", 8},
      {7, "  epochs: 3\n  betas: [0.9, 1.0]", "train.betas[1]: must be in [0.0, 1.0)", 8},
      {7, "  epochs: 3\n  warmup_epochs: -1", "train.warmup_epochs: must be >= 0", 8},
      {7, "  epochs: 3\n  threads: -1", "train.threads: must be >= 0", 8},
      {7, "  epochs: 3\n  milestones: [5, 3]", "train.milestones[1]", 8},
      {7, "  epochs: 3\n  schedule: multistep", "needs train.milestones", 8},
      {5, "  val: val\n  image_size: 16", "data.image_size: must be >= 32", 6},
      {5, "  val: val\n  image_size: 48\n  resize: 48", "data.image_size: must be >= 63 for model.name alexnet_bn", 6},
      {5, "  val: val\n  image_size: 128\n  resize: 100", "data.resize: must be >= data.image_size (128)", 7},
      {5, "  val: val\n  image_size: 224", "data.image_size: must be <= data.resize (144, the default)", 6},
      {5, "  val: val\n  workers: -1", "data.workers: must be >= 0", 6},
      {5, "  val: val\n  prefetch: 0", "data.prefetch: must be >= 1", 6},
      {5, "  val: val\n  std: [0.2, 0, 0.2]", "data.std[1]: must be a positive number a float holds", 6},
      // Doubles that a float cannot hold (they became inf or 0 in the pipeline, naming no key).
      {5, "  val: val\n  std: [0.2, 1.0e-320, 0.2]", "data.std[1]: must be a positive number a float holds", 6},
      {5, "  val: val\n  std: [0.2, 1.0e+39, 0.2]", "data.std[1]: must be a positive number a float holds", 6},
      {5, "  val: val\n  mean: [1.0e+308, 0, 0]", "data.mean[0]: must be a number a float holds", 6},
      {5, "  val: val\n  augment:\n    scale: [0.5, 0.1]", "data.augment.scale: expected [low, high]", 7},
      {5, "  val: val\n  augment:\n    ratio: [0, 1]", "data.augment.ratio[0]: must be > 0", 7},
      {2, "  name: resnet50", "model.name: unknown model 'resnet50'", 2},
      {2, "  name: alexnet\n  num_classes: 0", "model.num_classes: must be >= 1", 3},
      // Keys that size buffers, threads and queues are bounded above too.
      {5, "  val: val\n  image_size: 4294967296\n  augment:\n    random_resized_crop: true",
       "data.image_size: must be <= 16384, got 4294967296", 6},
      {5, "  val: val\n  resize: 100000", "data.resize: must be <= 16384", 6},
      {5, "  val: val\n  augment:\n    padding: 65536", "data.augment.padding: must be <= 16384", 7},
      {5, "  val: val\n  workers: 1000", "data.workers: must be <= 256, got 1000", 6},
      {5, "  val: val\n  prefetch: 9223372036854775807", "data.prefetch: must be <= 1024", 6},
      {7, "  epochs: 3\n  batch_size: 1000000", "train.batch_size: must be <= 65536", 8},
      {7, "  epochs: 3\n  threads: 100000", "train.threads: must be <= 1024", 8},
      {2, "  name: alexnet\n  num_classes: 2000000", "model.num_classes: must be <= 1048576", 3},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto& c = cases[i];
    INFO(c.text);
    std::string name = "r";
    name += std::to_string(i);
    name += ".yaml";
    auto p = t.write(name, with_line(kMinimal, c.line, c.text));
    REQUIRE_THROWS_WITH(load_config(p),
                        Contains(c.expect) && Contains("line " + std::to_string(c.err_line)) && Contains(p));
  }
  // With random_resized_crop a resize smaller than the crop is fine.
  auto ok = t.write("rrc.yaml",
                    with_line(kMinimal, 5, "  val: val\n  image_size: 224\n  augment:\n    random_resized_crop: true"));
  CHECK_NOTHROW(load_config(ok));
}

TEST_CASE("config: missing required keys and missing paths", "[config]") {
  TempDir t;
  auto p1 = t.write("noval.yaml", with_line(kMinimal, 5, ""));
  REQUIRE_THROWS_WITH(load_config(p1), Contains("missing required key 'data.val'") && Contains(p1) &&
                                           Contains("line 3") && Contains("in section 'data'"));
  auto p2 = t.write("noepochs.yaml", with_line(kMinimal, 7, ""));
  REQUIRE_THROWS_WITH(load_config(p2), Contains("missing required key 'train.epochs'"));
  auto p3 = t.write("nomodel.yaml", with_line(with_line(kMinimal, 1, ""), 2, ""));
  REQUIRE_THROWS_WITH(load_config(p3), Contains("missing required key 'model.name'"));
  auto p4 = t.write("noout.yaml", with_line(with_line(kMinimal, 8, ""), 9, ""));
  REQUIRE_THROWS_WITH(load_config(p4),
                      Contains("missing required key 'output.dir'") && Contains("no 'output' section"));
  // A section that only --set created still reports what it lacks.
  auto p4b = t.write("notrain.yaml", with_line(with_line(kMinimal, 6, ""), 7, ""));
  REQUIRE_THROWS_WITH(load_config(p4b, {"train.lr=0.1"}), Contains("missing required key 'train.epochs'"));
  CHECK(load_config(p4b, {"train.lr=0.1", "train.epochs=2"}).train.epochs == 2);

  auto p5 = t.write("nodir.yaml", with_line(kMinimal, 4, "  train: does/not/exist"));
  REQUIRE_THROWS_WITH(load_config(p5), Contains("data.train") && Contains("line 4") && Contains("no such directory") &&
                                           Contains("does/not/exist"));
  t.write("a_file", "x");
  auto p6 = t.write("notdir.yaml", with_line(kMinimal, 5, "  val: a_file"));
  REQUIRE_THROWS_WITH(load_config(p6), Contains("data.val") && Contains("line 5") && Contains("not a directory"));

  // Relative data roots resolve against the YAML file's folder, not the cwd.
  auto p7 = t.write("sub/deeper.yaml", with_line(with_line(kMinimal, 4, "  train: ../train"), 5, "  val: ../val"));
  ExperimentConfig c = load_config(p7);
  CHECK(fs::path(c.data.train) == fs::absolute(t.dir / "train").lexically_normal());
  CHECK(fs::path(c.data.val) == fs::absolute(t.dir / "val").lexically_normal());
  // Absolute roots are kept.
  auto p8 = t.write("abs.yaml", with_line(kMinimal, 4, "  train: " + (t.dir / "val").string()));
  CHECK(fs::path(load_config(p8).data.train) == fs::absolute(t.dir / "val").lexically_normal());
}

TEST_CASE("config: unreadable files and YAML syntax errors", "[config]") {
  TempDir t;
  std::string missing = (t.dir / "nope.yaml").string();
  REQUIRE_THROWS_WITH(load_config(missing), Contains(missing) && Contains("no such file"));
  auto p = t.write("syntax.yaml", "model:\n  name: alexnet_bn\ntrain: [1, 2\nepochs: 3\n");
  REQUIRE_THROWS_WITH(load_config(p), Contains(p) && Contains("line") && Contains("YAML syntax error"));
  auto q = t.write("scalar.yaml", "just a string\n");
  REQUIRE_THROWS_WITH(load_config(q), Contains(q) && Contains("expected a mapping"));
  // An empty file is an empty mapping: the first required key is missing.
  auto e = t.write("empty.yaml", "");
  REQUIRE_THROWS_WITH(load_config(e), Contains("missing required key 'model.name'"));
}

TEST_CASE("config: --set overrides apply on the YAML tree before validation", "[config]") {
  TempDir t;
  auto p = t.write("min.yaml", kMinimal);
  SECTION("valid overrides, including keys absent from the file and new sections") {
    ExperimentConfig c = load_config(p, {"train.lr=0.1", "data.augment.hflip=false", "train.milestones=[3,6]",
                                         "train.schedule=multistep", "train.epochs=9", "model.num_classes=5",
                                         "output.dir=runs/other/"});
    CHECK(c.train.lr == 0.1);
    CHECK_FALSE(c.data.augment.hflip);
    CHECK(c.train.milestones == std::vector<int64_t>{3, 6});
    CHECK(c.train.schedule == qat::LrScheduleKind::multistep);
    CHECK(c.train.epochs == 9);
    CHECK(c.model.num_classes == 5);
    CHECK(c.output.dir == "runs/other");
    // The later override wins.
    CHECK(load_config(p, {"train.lr=0.1", "train.lr=0.2"}).train.lr == 0.2);
    // A path given by --set is still relative to the YAML file's folder.
    CHECK(fs::path(load_config(p, {"data.val=train"}).data.val) == fs::absolute(t.dir / "train").lexically_normal());
  }
  SECTION("unknown key") {
    REQUIRE_THROWS_WITH(load_config(p, {"train.lrr=0.1"}), Contains("unknown key 'train.lrr'") &&
                                                               Contains("--set train.lrr=0.1") &&
                                                               Contains("train.lr'"));
    REQUIRE_THROWS_WITH(load_config(p, {"foo=1"}), Contains("unknown key 'foo'"));
    REQUIRE_THROWS_WITH(load_config(p, {"train.lr.x=1"}), Contains("unknown key 'train.lr.x'"));
  }
  SECTION("wrong type and out of range say the value came from --set") {
    REQUIRE_THROWS_WITH(load_config(p, {"train.lr=abc"}), Contains("train.lr: expected a number, got 'abc'") &&
                                                              Contains("--set train.lr=abc") && Contains(p));
    REQUIRE_THROWS_WITH(load_config(p, {"data.augment.hflip=1"}),
                        Contains("data.augment.hflip: expected true or false") && Contains("--set"));
    REQUIRE_THROWS_WITH(load_config(p, {"train.epochs=0"}),
                        Contains("train.epochs: must be >= 1") && Contains("--set"));
    REQUIRE_THROWS_WITH(load_config(p, {"data.train=nowhere"}),
                        Contains("data.train") && Contains("no such directory"));
  }
  SECTION("one layer's quant.overrides entry, its name holding dots") {
    const ExperimentConfig c = load_config(p, {"quant.overrides.features.0.0.weight_bits=8",
                                               "quant.overrides.features.0.0.activation_bits=6",
                                               "quant.overrides.fc.weight_bits=4"});
    REQUIRE(c.quant.overrides.size() == 2);
    CHECK(c.quant.overrides.at("features.0.0").weight_bits == 8);
    CHECK(c.quant.overrides.at("features.0.0").activation_bits == 6);
    CHECK(c.quant.overrides.at("fc").weight_bits == 4);
    CHECK(c.quant.overrides.at("fc").activation_bits == 0);
    REQUIRE_THROWS_WITH(load_config(p, {"quant.overrides.fc.weight_bits=9"}),
                        Contains("quant.overrides.fc.weight_bits: bits must be in 2..8, got 9") &&
                            Contains("--set quant.overrides.fc.weight_bits=9"));
    REQUIRE_THROWS_WITH(load_config(p, {"quant.overrides.fc.bits=4"}), Contains("unknown key 'quant.overrides.fc.bits'"));
    // A file's own error beside such a --set keeps its file and line.
    const auto q = t.write("q.yaml", std::string(kMinimal) + "quant:\n  enabled: true\n  bits: 99\n");
    REQUIRE_THROWS_WITH(load_config(q, {"quant.overrides.fc.weight_bits=4"}),
                        Contains(q + ", line ") && Contains("quant.bits") && !Contains("--set"));
  }
  SECTION("malformed overrides") {
    REQUIRE_THROWS_WITH(load_config(p, {"train.lr"}), Contains("expected key.path=value"));
    REQUIRE_THROWS_WITH(load_config(p, {"train.milestones=[3,"}),
                        Contains("train.milestones") && Contains("not valid YAML"));
    REQUIRE_THROWS_WITH(load_config(p, {"data.augment={hflip: false}"}),
                        Contains("data.augment") && Contains("section"));
  }
}

TEST_CASE("config: config_to_yaml round-trips to an equal config", "[config]") {
  TempDir t;
  for (const char* text : {kFull, kMinimal}) {
    ExperimentConfig a = load_config(t.write("orig.yaml", text), {"train.lr=0.1", "train.seed=18446744073709551615"});
    std::string yaml = config_to_yaml(a);
    INFO(yaml);
    // Every key is written, defaults included, enums as strings.
    for (const char* key : {"num_classes:", "random_resized_crop:", "min_lr_factor:", "on_bad_image:", "milestones:",
                            "max_steps_per_epoch:", "dir:", "optimizer:", "schedule:"})
      CHECK_THAT(yaml, Contains(key));
    // Written somewhere else: the data roots are absolute, so they still resolve.
    auto copy = t.write("run/config.yaml", yaml);
    ExperimentConfig b = load_config(copy);
    CHECK(config_to_yaml(b).substr(config_to_yaml(b).find("model:")) == yaml.substr(yaml.find("model:")));
    CHECK(b.model.name == a.model.name);
    CHECK(b.data.train == a.data.train);
    CHECK(b.data.val == a.data.val);
    CHECK(b.data.augment.scale == a.data.augment.scale);
    CHECK(b.data.augment.ratio == a.data.augment.ratio);
    CHECK(b.data.mean == a.data.mean);
    CHECK(b.data.on_bad_image == a.data.on_bad_image);
    CHECK(b.train.lr == a.train.lr);
    CHECK(b.train.eps == a.train.eps);
    CHECK(b.train.optimizer == a.train.optimizer);
    CHECK(b.train.schedule == a.train.schedule);
    CHECK(b.train.milestones == a.train.milestones);
    CHECK(b.train.warmup_epochs == a.train.warmup_epochs);
    CHECK(b.train.seed == 18446744073709551615ull);
    CHECK(b.output.dir == a.output.dir);
    CHECK(config_hash(a) == config_hash(b));
  }
  // Doubles are written exactly (shortest round-trip form).
  ExperimentConfig c = load_config(t.write("m.yaml", kMinimal), {"train.lr=0.1", "train.weight_decay=3e-5",
                                                                 "train.min_lr_factor=0.3333333333333333"});
  ExperimentConfig d = load_config(t.write("m2.yaml", config_to_yaml(c)));
  CHECK(d.train.lr == 0.1);
  CHECK(d.train.weight_decay == 3e-5);
  CHECK(d.train.min_lr_factor == 0.3333333333333333);
}

TEST_CASE("config: the hash is stable, ignores output.dir and threads, follows the experiment", "[config]") {
  TempDir t;
  auto p = t.write("min.yaml", kMinimal);
  ExperimentConfig a = load_config(p);
  std::string h = config_hash(a);
  CHECK(h.size() == 16);
  CHECK(h.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(config_hash(load_config(p)) == h);
  CHECK(config_hash(load_config(p, {"output.dir=elsewhere", "train.threads=7"})) == h);
  // The same experiment from another file location hashes the same.
  auto q = t.write("sub/min.yaml", with_line(with_line(kMinimal, 4, "  train: ../train"), 5, "  val: ../val"));
  CHECK(config_hash(load_config(q)) == h);
  CHECK(config_hash(load_config(p, {"train.lr=0.05"})) != h);
  CHECK(config_hash(load_config(p, {"train.seed=1"})) != h);
  CHECK(config_hash(load_config(p, {"data.augment.hflip=false"})) != h);
}

TEST_CASE("config: quant.integer_forward needs a quantized model, excludes INT8 training, counts in the hash",
          "[config]") {
  TempDir t;
  auto p = t.write("min.yaml", kMinimal);
  REQUIRE_THROWS_WITH(load_config(p, {"quant.integer_forward=true"}),
                      Contains("quant.integer_forward") && Contains("needs quant.enabled: true"));
  REQUIRE_THROWS_WITH(
      load_config(p, {"quant.enabled=true", "quant.integer_forward=true", "quant.int8_training.enabled=true"}),
      Contains("quant.integer_forward") && Contains("INT8 training's forward already runs on the integer GEMMs"));
  const ExperimentConfig on = load_config(p, {"quant.enabled=true", "quant.integer_forward=true"});
  REQUIRE(on.quant.integer_forward);
  const std::string h = config_hash(load_config(p, {"quant.enabled=true"}));
  CHECK(config_hash(on) != h);
  CHECK(config_hash(load_config(p, {"quant.enabled=true", "quant.integer_forward=false"})) == h);
  // The resolved config carries it either way.
  CHECK(load_config(t.write("resolved.yaml", config_to_yaml(on))).quant.integer_forward);
}

// A run recorded before quant.bn_reestimation_batches existed resumes: with
// the key at 0 the hash is the one qat computed then. The value was read
// from a checkpoint's config_hash_data_apart written by qat at c77ff74 (the
// commit before the key) for this config (data folders apart: they differ
// between machines).
TEST_CASE("config: quant.bn_reestimation_batches counts in the hash only when not 0", "[config]") {
  TempDir t;
  const std::string p = t.write("min.yaml", std::string(kMinimal) + "quant:\n  enabled: true\n");
  CHECK(config_hash_data_apart(load_config(p)) == "0005bd4057561150");
  CHECK(config_hash_data_apart(load_config(p, {"quant.bn_reestimation_batches=0"})) == "0005bd4057561150");
  CHECK(config_hash_data_apart(load_config(p, {"quant.bn_reestimation_batches=50"})) != "0005bd4057561150");
}

TEST_CASE("config: the shipped configs are valid", "[config]") {
  // Their data roots are replaced by temporary folders so that this test does
  // not depend on the datasets being present; the real paths are checked
  // when they exist.
  TempDir t;
  fs::path configs = fs::path(QAT_SOURCE_DIR) / "configs";
  for (const char* name : {"quickstart.yaml", "alexnet_fp32_imagenette.yaml"}) {
    INFO(name);
    fs::path p = configs / name;
    REQUIRE(fs::exists(p));
    ExperimentConfig c = load_config(p.string(), {"data.train=" + (t.dir / "train").string(),
                                                  "data.val=" + (t.dir / "val").string()});
    CHECK(c.model.name == "alexnet_bn");
    CHECK(c.train.seed == 0);
    CHECK(c.train.schedule == qat::LrScheduleKind::cosine);
    CHECK(c.train.optimizer == OptimizerKind::sgd);
    CHECK(c.train.lr == 0.02);
    CHECK(c.train.momentum == 0.9);
    CHECK(c.train.weight_decay == 5e-4);
  }
  ExperimentConfig q = load_config((configs / "quickstart.yaml").string(), {"data.train=" + (t.dir / "train").string(),
                                                                            "data.val=" + (t.dir / "val").string()});
  CHECK(q.data.image_size == 64);
  CHECK(q.data.resize == 72);
  CHECK(q.data.cache);
  CHECK(q.output.dir == "runs/quickstart");
  ExperimentConfig a =
      load_config((configs / "alexnet_fp32_imagenette.yaml").string(),
                  {"data.train=" + (t.dir / "train").string(), "data.val=" + (t.dir / "val").string()});
  CHECK(a.data.image_size == 128);
  CHECK(a.data.resize == 144);
  CHECK(a.data.augment.random_crop);
  CHECK(a.data.augment.hflip);
  CHECK(a.train.batch_size == 64);
  CHECK(a.train.epochs == 10);
  CHECK(a.output.dir == "runs/alexnet_fp32_imagenette");

  for (const char* name : {"quickstart.yaml", "alexnet_fp32_imagenette.yaml"}) {
    fs::path p = configs / name;
    ExperimentConfig probe = load_config(p.string(), {"data.train=" + (t.dir / "train").string(),
                                                      "data.val=" + (t.dir / "val").string()});
    (void)probe;
    // The real data roots: load as written when they exist.
    std::string rel = std::string(name) == "quickstart.yaml" ? "../data/samples/imagenette-mini"
                                                             : "../../shared/datasets/imagenette";
    if (fs::is_directory(configs / rel / "train") && fs::is_directory(configs / rel / "val")) {
      ExperimentConfig c = load_config(p.string());
      CHECK(fs::path(c.data.train) == fs::absolute(configs / rel / "train").lexically_normal());
    } else {
      WARN(name << ": data not present at " << (configs / rel).string() << "; only the schema was checked");
    }
  }
}

TEST_CASE("config: an enum value without a name is never written as a config", "[config]") {
  TempDir t;
  ExperimentConfig c = load_config(t.write("min.yaml", kMinimal));
  c.train.optimizer = static_cast<OptimizerKind>(7);  // a cast from an out-of-range integer
  REQUIRE_THROWS_WITH(config_to_yaml(c), Contains("train.optimizer") && Contains("without a name (7)"));
}

TEST_CASE("config: every shipped experiment config under configs/ loads", "[config]") {
  TempDir t;
  int loaded = 0;
  for (const auto& e : fs::directory_iterator(fs::path(QAT_SOURCE_DIR) / "configs")) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    const ExperimentConfig c = load_config(e.path().string(), {"data.train=" + (t.dir / "train").string(),
                                                               "data.val=" + (t.dir / "val").string()});
    CHECK(c.train.epochs > 0);
    ++loaded;
  }
  CHECK(loaded >= 8);
  const ExperimentConfig a7 =
      load_config((fs::path(QAT_SOURCE_DIR) / "configs" / "alexnet_w8a7_imagenette.yaml").string(),
                  {"data.train=" + (t.dir / "train").string(), "data.val=" + (t.dir / "val").string()});
  CHECK(a7.quant.bits == 8);
  CHECK(a7.quant.activation.bits == 7);
}

TEST_CASE("config: model.stem for resnet18 only, written only where it applies", "[config]") {
  TempDir t;
  const std::string resnet = std::string(kMinimal).replace(std::string(kMinimal).find("alexnet_bn"), 10, "resnet18");
  auto with_stem = [](std::string text) { return text.replace(text.find("\ndata:"), 0, "\n  stem: small"); };
  ExperimentConfig c = load_config(t.write("r.yaml", with_stem(resnet)));
  CHECK(c.model.stem == qat::ResNetStem::small);
  CHECK(config_to_yaml(c).find("stem: small") != std::string::npos);
  qat::ModulePtr m = qat::make_model(c.model.name, 10, 0, c.model.options());
  CHECK(m->state_dict().at("conv1.weight").sizes() == qat::Shape{64, 3, 3, 3});
  CHECK(load_config(t.write("r2.yaml", resnet)).model.stem == qat::ResNetStem::imagenet);
  // AlexNet: refused when given, naming the key and its line; absent from the resolved config.
  REQUIRE_THROWS_WITH(load_config(t.write("a.yaml", with_stem(kMinimal))),
                      Contains("line 3") && Contains("model.stem") && Contains("does not apply to model.name alexnet_bn"));
  CHECK(config_to_yaml(load_config(t.write("a2.yaml", kMinimal))).find("stem") == std::string::npos);
}

TEST_CASE("config: a graph model quantizes (QAT), trains in INT8 and runs the integer forward", "[config]") {
  TempDir t;
  std::string text = std::string(kMinimal).replace(std::string(kMinimal).find("alexnet_bn"), 10, "resnet20");
  CHECK(load_config(t.write("q.yaml", text + "quant:\n  enabled: true\n")).quant.enabled);
  CHECK(load_config(t.write("q.yaml", text + "quant:\n  enabled: true\n  int8_training:\n    enabled: true\n"))
            .quant.int8_training.enabled);
  CHECK(load_config(t.write("q.yaml", text + "quant:\n  enabled: true\n  integer_forward: true\n")).quant.integer_forward);
}

// Every experiment config shipped in configs/ loads, and its model builds
// (prepared for QAT where quant.enabled: its overrides and keep_float name
// real layers, its patterns are the backend's; INT8 training takes its
// layers), with temporary data roots.
TEST_CASE("config: every shipped experiment config loads and builds its model", "[config]") {
  TempDir t;
  int checked = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(QAT_SOURCE_DIR) / "configs")) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().filename().string());
    const ExperimentConfig c = load_config(
        e.path().string(), {"data.train=" + (t.dir / "train").string(), "data.val=" + (t.dir / "val").string()});
    const qat::ModulePtr m = qat::apps::build_model(c, false, false);  // (INT8 training switched on where enabled)
    if (c.quant.enabled && c.quant.int8_training.enabled) CHECK_FALSE(qat::quant::int8_layers(*m).empty());
    ++checked;
  }
  CHECK(checked >= 20);
}
