// Note [checkpoint identity] and issue 39's misleading messages: a loader
// handed another model, another kind of checkpoint, a folder or a file of
// another format says what it got and what it wants, in words, before any
// tensor is read.
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "apps/calibrate_cmd.h"
#include "apps/integer_cmd.h"
#include "apps/run_state.h"
#include "apps/sensitivity_cmd.h"
#include "apps/train.h"
#include "core/safetensors.h"
#include "core/text_file.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// An FP32 run, a QAT run from it, a calibration, an export and an INT8-training run, once per process.
struct Runs {
  fs::path dir;
  std::string fp32_cfg, qat_cfg, int8_cfg;
  std::string fp32() const { return (dir / "fp32" / "best.safetensors").string(); }
  std::string qat() const { return (dir / "qat" / "best.safetensors").string(); }
  std::string int8() const { return (dir / "int8" / "last.safetensors").string(); }
  std::string calibrated() const { return (dir / "ptq" / "calibrated.safetensors").string(); }
};

const char* kQuant = "quant: {enabled: true, backend: default, method: minmax}\n";

const Runs& runs() {
  static const Runs r = [] {
    Runs r;
    r.dir = testing::fresh_temp_dir("qat_ident_", "runs");
    r.fp32_cfg = testing::write_sample_config(r.dir, "fp32.yaml", "", 1, 2, "fp32");
    REQUIRE(run_train({r.fp32_cfg, {}, ""}) == 0);
    r.qat_cfg = testing::write_sample_config(r.dir, "qat.yaml", kQuant, 1, 2, "qat");
    REQUIRE(run_train({r.qat_cfg, {}, ""}) == 0);
    r.int8_cfg = testing::write_sample_config(
        r.dir, "int8.yaml", "quant:\n  enabled: true\n  int8_training: {enabled: true, keep_float: [fc]}\n", 1, 2,
        "int8");
    REQUIRE(run_train({r.int8_cfg, {}, ""}) == 0);
    CalibrateArgs c;
    c.config = r.qat_cfg;
    c.checkpoint = r.fp32();
    c.images = 16;
    c.out_dir = (r.dir / "ptq").string();
    REQUIRE(run_calibrate(c) == 0);
    REQUIRE(run_export({(r.dir / "ptq" / "config.yaml").string(), r.calibrated(), (r.dir / "export").string(), {}}) ==
            0);
    return r;
  }();
  return r;
}

CalibrateArgs calibrate_from(const std::string& checkpoint, const std::string& config = "") {
  CalibrateArgs c;
  c.config = config.empty() ? runs().qat_cfg : config;
  c.checkpoint = checkpoint;
  c.images = 16;
  c.out_dir = (runs().dir / "never").string();
  return c;
}

}  // namespace

TEST_CASE("checkpoints record their model, classes and kind", "[e2e][checkpoint]") {
  const Runs& r = runs();
  for (const auto& [path, kind] : {std::pair{r.fp32(), "float"}, {r.qat(), "qat"}, {r.int8(), "int8"},
                                   {r.calibrated(), "calibrated"}}) {
    INFO(path);
    const Metadata m = load_safetensors_metadata(path);
    CHECK(m.at("model") == "small_cnn");
    CHECK(m.at("num_classes") == "10");
    CHECK(m.at("kind") == kind);
  }
}

TEST_CASE("a checkpoint of another model or other classes is named as such", "[e2e][checkpoint]") {
  const Runs& r = runs();
  const std::string alexnet = testing::write_sample_config(r.dir, "alexnet.yaml", kQuant, 1, 2, "alex");
  std::string text = read_text_file(alexnet);
  text.replace(text.find("small_cnn"), 9, "alexnet_bn");
  text.replace(text.find("image_size: 32"), 14, "image_size: 64");  // (AlexNet's smallest input: 63)
  text.replace(text.find("resize: 36"), 10, "resize: 72");
  write_text_file_atomic(alexnet, text);
  REQUIRE_THROWS_WITH(run_calibrate(calibrate_from(r.fp32(), alexnet)),
                      Contains("calibrate --checkpoint " + r.fp32() + " holds a small_cnn model with 10 classes, but "
                               "config " + alexnet + " builds alexnet_bn with 10 classes"));
  REQUIRE_THROWS_WITH(eval_checkpoint({r.qat_cfg, {"model.num_classes=5"}, r.qat()}),
                      Contains("checkpoint " + r.qat() + " holds a small_cnn model with 10 classes, but config " +
                               r.qat_cfg + " builds small_cnn with 5 classes"));
  CHECK_FALSE(fs::exists(r.dir / "never"));
}

TEST_CASE("a checkpoint of the wrong kind is named, with what the command takes", "[e2e][checkpoint]") {
  const Runs& r = runs();
  SECTION("calibrate and sensitivity start from a float model") {
    REQUIRE_THROWS_WITH(run_calibrate(calibrate_from(r.qat())),
                        Contains("calibrate --checkpoint " + r.qat() + " is a QAT checkpoint, not a float (FP32) "
                                 "checkpoint; it starts from a float model"));
    SensitivityArgs s;
    s.config = r.qat_cfg;
    s.checkpoint = r.calibrated();
    s.out_dir = (r.dir / "never").string();
    REQUIRE_THROWS_WITH(run_sensitivity(s), Contains("sensitivity --checkpoint " + r.calibrated() +
                                                     " is a calibration (qat calibrate), not a float (FP32) checkpoint"));
  }
  SECTION("quant.init_from takes a float model or a calibration") {
    for (const std::string& from : {r.qat(), r.int8()}) {
      INFO(from);
      REQUIRE_THROWS_WITH(run_train({r.qat_cfg, {"quant.init_from=" + from, "output.dir=" + (r.dir / "x").string()},
                                     ""}),
                          Contains("quant.init_from " + from + " is a") &&
                              Contains("not a float (FP32) checkpoint or a calibration (qat calibrate); QAT starts "
                                       "from a float model") &&
                              Contains("to continue a QAT run, use --resume"));
    }
  }
  SECTION("eval of a float checkpoint with a QAT config, of an INT8 one with INT8 training off") {
    REQUIRE_THROWS_WITH(eval_checkpoint({r.qat_cfg, {}, r.fp32()}),
                        Contains("checkpoint " + r.fp32() + " is a float (FP32) checkpoint, not a QAT checkpoint or a "
                                 "calibration (qat calibrate); config " + r.qat_cfg + " builds a QAT model"));
    REQUIRE_THROWS_WITH(eval_checkpoint({r.qat_cfg, {}, r.int8()}),
                        Contains("is a checkpoint of INT8 training (quant.int8_training), not a QAT checkpoint") &&
                            Contains("quant.int8_training.enabled false"));
  }
  SECTION("--resume of an INT8 run with INT8 training off names the key, not an unexpected tensor") {
    REQUIRE_THROWS_WITH(run_train({r.int8_cfg, {"quant.int8_training.enabled=false"}, (r.dir / "int8").string()}),
                        Contains("is a checkpoint of INT8 training (quant.int8_training)") &&
                            Contains("quant.int8_training.enabled false") && !Contains("unexpected keys"));
  }
}

TEST_CASE("a folder or a file of another format given as a checkpoint is named as what it is", "[e2e][checkpoint]") {
  const Runs& r = runs();
  const std::string exp = (r.dir / "export").string();
  REQUIRE_THROWS_WITH(run_calibrate(calibrate_from(exp)),
                      Contains("calibrate --checkpoint " + exp + " is an export folder (qat export), not a checkpoint"));
  REQUIRE_THROWS_WITH(run_calibrate(calibrate_from((r.dir / "fp32").string())),
                      Contains("is a training run folder, not a checkpoint: name its best.safetensors"));
  const std::string cache = (r.dir / "ptq" / "calibration.cache").string();
  REQUIRE_THROWS_WITH(run_calibrate(calibrate_from(cache)),
                      Contains("load_safetensors '" + cache + "': not a safetensors file: it is text beginning "
                               "\"TRT-8601-"));
  REQUIRE_THROWS_WITH(run_calibrate(calibrate_from(r.qat_cfg)),
                      Contains("not a safetensors file: it is text beginning \"model: {name: small_cnn"));
  const std::string onnx = (r.dir / "m.onnx").string();
  REQUIRE(run_export({(r.dir / "ptq" / "config.yaml").string(), r.calibrated(), onnx, {}, "onnx"}) == 0);
  REQUIRE_THROWS_WITH(run_calibrate(calibrate_from(onnx)),
                      Contains("not a safetensors file: it is an ONNX model (protobuf)"));
  CHECK_FALSE(fs::exists(r.dir / "never"));
}

TEST_CASE("an unknown keep_float layer names the config file, the line and the layers there are", "[e2e][checkpoint]") {
  const Runs& r = runs();
  const std::string cfg = testing::write_sample_config(
      r.dir, "keep.yaml", "quant:\n  enabled: true\n  int8_training:\n    enabled: true\n    keep_float: [features.99]\n",
      1, 2, "keep");
  REQUIRE_THROWS_WITH(run_train({cfg, {}, ""}),
                      Contains(cfg + ", line 20") && Contains("quant.int8_training.keep_float: 'features.99' is not a "
                                                             "quantized layer of small_cnn; its quantized layers: "
                                                             "features.0, features.4, fc"));
}
