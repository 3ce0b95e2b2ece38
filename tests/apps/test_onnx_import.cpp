// ONNX import (apps/onnx_import.h, Note [onnx import]): models built with
// the onnx package's helper in ONNX Runtime's virtual environment
// (tests/onnx/make_import_models.py) imported and run in eval mode against
// ONNX Runtime's outputs; module names; every refusal naming the node; a
// config's model.onnx.
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/bench.h"
#include "apps/config.h"
#include "apps/integer_cmd.h"
#include "apps/model_file.h"
#include "apps/onnx_import.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "core/error.h"

using Catch::Matchers::Contains;
using namespace qat;
using namespace qat::apps;
namespace fs = std::filesystem;

namespace {

// The models, made once per process into a temporary folder.
const fs::path& models_dir() {
  static const testing::TempDir dir("qat_onnx_import_");
  static const bool made = [] {
    const fs::path py = fs::path(QAT_SOURCE_DIR) / ".venv-onnx" / "bin" / "python";
    INFO("ONNX Runtime's virtual environment is missing: run scripts/setup.sh");
    REQUIRE(fs::exists(py));
    std::ostringstream cmd;
    cmd << py.string() << " " << QAT_SOURCE_DIR << "/tests/onnx/make_import_models.py " << dir.dir.string();
    REQUIRE(std::system(cmd.str().c_str()) == 0);
    return true;
  }();
  (void)made;
  return dir.dir;
}

std::string model_path(const std::string& name) { return (models_dir() / (name + ".onnx")).string(); }

Tensor read_f32(const std::string& name, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::ifstream f(models_dir() / name, std::ios::binary);
  f.read(reinterpret_cast<char*>(t.data<float>()), static_cast<std::streamsize>(t.numel() * 4));
  REQUIRE(f.gcount() == static_cast<std::streamsize>(t.numel() * 4));
  return t;
}

std::string import_error(const std::string& path) {
  try {
    import_onnx(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("ONNX import: qat's forward of an imported model equals ONNX Runtime's", "[onnx][import]") {
  for (const char* name : {"residual_bn", "folded"}) {
    DYNAMIC_SECTION(name) {
      std::shared_ptr<Graph> g = import_onnx(model_path(name));
      g->eval();
      NoGradGuard no_grad;
      const Tensor y = g->forward(read_f32(std::string(name) + ".input.f32", {2, 3, 16, 16}));
      const Tensor want = read_f32(std::string(name) + ".output.f32", {2, 10});
      REQUIRE(y.sizes() == want.sizes());
      double scale = 0, worst = 0;
      for (int64_t i = 0; i < y.numel(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(want.data<float>()[i])));
        worst = std::max(worst, std::fabs(static_cast<double>(y.data<float>()[i]) - want.data<float>()[i]));
      }
      INFO("largest difference " << worst << " of logits up to " << scale);
      // float sums in another order than ONNX Runtime's kernels
      CHECK(worst <= 1e-6 * scale);  // measured 2.2e-7 of the scale (AMD EPYC Zen 4)
    }
  }
}

TEST_CASE("ONNX import: modules named as the state dict where the weights say so, else by the node", "[onnx][import]") {
  const TensorMap bn = import_onnx(model_path("residual_bn"))->state_dict();
  for (const char* k : {"stem.weight", "bn.running_var", "block.dw.weight", "block.bn1.weight", "block.pw.weight",
                        "fc.weight", "fc.bias"})
    CHECK(bn.count(k));
  CHECK(bn.at("block.dw.weight").sizes() == Shape({8, 1, 3, 3}));
  const TensorMap folded = import_onnx(model_path("folded"))->state_dict();
  CHECK(folded.count("features_features_0_Conv.weight"));
  CHECK(folded.count("features_features_0_Conv.bias"));
  CHECK(folded.at("classifier_MatMul.weight").sizes() == Shape({10, 16}));  // (out, in): B transposed
  CHECK(folded.count("classifier_MatMul.bias"));
}

TEST_CASE("ONNX import refuses what qat's layers cannot run, naming the node", "[onnx][import]") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"op", {"ONNX node '/act/Sigmoid' (Sigmoid)", "op Sigmoid is not imported", "Clip (as ReLU6)"}},
      {"clip", {"'/act/Clip' (Clip)", "bounds 0", "4", "[0, 6]"}},
      {"pads", {"'/pool/MaxPool' (MaxPool)", "pads differ", "symmetric"}},
      {"opset", {"opset 9", "11 to 17"}},
      {"ceil", {"'/pool/MaxPool' (MaxPool)", "ceil_mode"}},
      // (a Gemm's int64 weight was read as floats that were not there: a crash)
      {"int_gemm", {"ONNX node '/fc/Gemm' (Gemm)", "its B (the weight) holds integers; qat imports float weights"}},
      {"bn_lengths", {"'/bn/BatchNormalization' (BatchNormalization)", "its bias has 10 values for a shape of [8]"}},
      {"named_input", {"ONNX node 'input' (Relu)", "'input' names the network's input"}},
      {"kernel_shape", {"'/conv/Conv' (Conv)", "kernel_shape 5 for a weight of 3x3"}},
      {"dup_output", {"'/act/Relu' (Relu)", "its output 'c' is written by an earlier node or initializer too"}},
      {"no_opset", {"no opset_import for the default domain"}},
  };
  for (const auto& [what, says] : cases) {
    DYNAMIC_SECTION(what) {
      const std::string path = model_path("refuse_" + what), error = import_error(path);
      INFO(error);
      CHECK_THAT(error, Contains(path));
      for (const std::string& s : says) CHECK_THAT(error, Contains(s));
    }
  }
  SECTION("a file that is not ONNX, and a truncated one") {
    const testing::TempDir t("qat_onnx_bad_");
    std::ofstream(t.dir / "text.onnx") << "model:\n  name: resnet20\n";
    CHECK_THAT(import_error((t.dir / "text.onnx").string()), Contains("not an ONNX model"));
    std::ifstream in(model_path("residual_bn"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(t.dir / "cut.onnx", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    const std::string error = import_error((t.dir / "cut.onnx").string());
    INFO(error);
    CHECK(error != "(no error)");
    CHECK_THAT(error, Contains("cut.onnx"));
  }
}

TEST_CASE("model.onnx in a config: named by the file, its weights, a dry run at data.image_size", "[onnx][import][config]") {
  const testing::TempDir t("qat_onnx_cfg_");
  fs::create_directories(t.dir / "train");
  fs::create_directories(t.dir / "val");
  fs::copy_file(model_path("residual_bn"), t.dir / "net.onnx");
  const std::string rest = "  num_classes: 10\ndata:\n  train: train\n  val: val\n  image_size: 32\n  resize: 32\n"
                           "train:\n  epochs: 1\noutput:\n  dir: runs/x\n";
  const std::string cfg_path = (t.dir / "c.yaml").string();
  std::ofstream(cfg_path) << "model:\n  onnx: net.onnx\n" << rest;
  const ExperimentConfig cfg = load_config(cfg_path);
  CHECK(cfg.model.name == "net");
  CHECK(cfg.model.onnx == (t.dir / "net.onnx").string());
  const TensorMap a = make_configured_model(cfg.model, 1)->state_dict(), b = import_onnx(cfg.model.onnx)->state_dict();
  CHECK(a.at("stem.weight").to_vector() == b.at("stem.weight").to_vector());  // the file's weights, not the seed's
  std::ofstream(cfg_path) << "model:\n  onnx: net.onnx\n" << "  num_classes: 7\n" << rest.substr(rest.find("data:"));
  REQUIRE_THROWS_WITH(load_config(cfg_path), Contains("net.onnx") && Contains("model.num_classes (7)"));
}

// The network a config imports is an input of every command that reads it:
// an ONNX export over it would leave the run's config naming another model.
TEST_CASE("export --format onnx refuses to write over the config's model.onnx", "[onnx][import][e2e]") {
  const fs::path dir = testing::fresh_temp_dir("qat_onnx_src_", "over");
  fs::copy_file(model_path("residual_bn"), dir / "net.onnx");
  const std::string cfg = testing::write_sample_config(dir, "q.yaml", "quant: {enabled: true}\n", 1, 2);
  std::string text;
  {
    std::ifstream in(cfg);
    std::getline(in, text, '\0');
  }
  const std::string built_in = "model: {name: small_cnn, num_classes: 10}\n";
  REQUIRE(text.find(built_in) != std::string::npos);
  text.replace(text.find(built_in), built_in.size(), "model: {onnx: net.onnx, num_classes: 10}\n");
  std::ofstream(cfg, std::ios::trunc) << text;
  REQUIRE(run_train({cfg, {}, ""}) == 0);
  auto bytes = [&] {
    std::ifstream in(dir / "net.onnx", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string before = bytes();
  ExportArgs a{cfg, (dir / "run" / "best.safetensors").string(), (dir / "net.onnx").string(), {}, "onnx"};
  REQUIRE_THROWS_WITH(run_export(a), Contains("--out " + a.out_dir + " is the input") &&
                                         Contains("(the config's model.onnx)"));
  CHECK(bytes() == before);
  // Another file passes that check (this network then stops at its average pool, which has no integer kernel).
  a.out_dir = (dir / "exported.onnx").string();
  REQUIRE_THROWS_WITH(run_export(a), Contains("has no integer kernel"));
  // Note [model source digest]: the checkpoint against the file as it is now. A second doc_string
  // field (protobuf field 6) appended: the same network, other bytes, as an edit would give.
  REQUIRE_NOTHROW(eval_checkpoint({cfg, {}, (dir / "run" / "best.safetensors").string()}));
  std::ofstream(dir / "net.onnx", std::ios::binary | std::ios::app) << std::string("\x32\x03" "abc", 5);
  REQUIRE_NOTHROW(import_onnx((dir / "net.onnx").string()));
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg, {}, (dir / "run" / "best.safetensors").string()}),
                      Contains("was saved with the network of " + (dir / "net.onnx").string()) &&
                          Contains("that file has changed since (model_source_sha256 "));
}

TEST_CASE("qat bench --model X.onnx checks the network's logits against --classes", "[onnx][import]") {
  BenchOptions o;
  o.model = model_path("residual_bn");  // (10 logits)
  o.res = 16, o.batch = 2, o.steps = 1, o.warmup = 0, o.threads = 1, o.classes = 7;
  REQUIRE_THROWS_WITH(run_bench(o), Contains(o.model + ": the network's output is [1, 10]") &&
                                        Contains("model.num_classes (7)"));
}
