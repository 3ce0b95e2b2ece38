// QAT of a graph model through `qat train` (Note [prepare on graphs]):
// ResNet-20 with LSQ on the embedded sample, interrupted and resumed to the
// same checkpoint bit for bit; qat eval reads it; qat export freezes it
// (Note [freezing a graph]) into both formats, qat eval and infer run the
// exported integer graph, and compare-layers compares it node by node.
#include "tests/graph_checks.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/safetensors.h"

using namespace qat;
namespace fs = std::filesystem;

namespace {

int run(const std::string& cmd, const fs::path& log) {
  const int rc = std::system((cmd + " > " + log.string() + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

// A ResNet-20 config on the embedded sample at 32 px, with these epochs, steps per epoch and quant: section.
void write_r20_config(const std::string& path, int epochs, int steps, const std::string& quant) {
  std::ofstream(path) << "model: {name: resnet20, num_classes: 10}\ndata:\n  train: " << testing::sample_data_dir()
                      << "/train\n  val: " << testing::sample_data_dir()
                      << "/val\n  image_size: 32\n  resize: 36\n  workers: 1\n"
                      << "train: {epochs: " << epochs << ", batch_size: 16, lr: 0.05, seed: 3, threads: 1, "
                      << "max_steps_per_epoch: " << steps << "}\nquant: " << quant << "\noutput: {dir: unused}\n";
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("qat train: LSQ QAT of ResNet-20 runs, resumes bit for bit, evaluates, exports and its export evaluates",
          "[graph][quant][train]") {
  const fs::path dir = testing::fresh_temp_dir("qat_graph_qat_", "r20");
  const std::string cfg = (dir / "cfg.yaml").string(), bin = QAT_BINARY;
  write_r20_config(cfg, 2, 4, "{enabled: true, method: lsq}");
  REQUIRE(run(bin + " train " + cfg + " --set output.dir=" + (dir / "whole").string(), dir / "whole.log") == 0);
  const std::string log = slurp(dir / "whole.log");
  INFO(log);
  CHECK(log.find("layer1.0.add: add+relu, output uint8") != std::string::npos);
  CHECK(run(bin + " train " + cfg + " --set output.dir=" + (dir / "cut").string() + " --stop-after-steps 3",
            dir / "cut1.log") == 130);
  REQUIRE(run(bin + " train " + cfg + " --resume " + (dir / "cut").string(), dir / "cut2.log") == 0);
  const SafetensorsFile a = load_safetensors((dir / "whole" / "last.safetensors").string());
  const SafetensorsFile b = load_safetensors((dir / "cut" / "last.safetensors").string());
  testing::require_same_tensors(a.tensors, b.tensors);
  CHECK(run(bin + " eval " + cfg + " --checkpoint " + (dir / "whole" / "best.safetensors").string(),
            dir / "eval.log") == 0);
  const std::string ckpt = (dir / "whole" / "best.safetensors").string();
  REQUIRE(run(bin + " export " + cfg + " --checkpoint " + ckpt + " --out " + (dir / "export").string(),
              dir / "export.log") == 0);
  CHECK(slurp(dir / "export" / "manifest.yaml").find("kind: add") != std::string::npos);
  CHECK(run(bin + " export " + cfg + " --checkpoint " + ckpt + " --format onnx --out " + (dir / "model.onnx").string(),
            dir / "onnx.log") == 0);
  REQUIRE(run(bin + " eval " + cfg + " --checkpoint " + (dir / "export").string(), dir / "eval_export.log") == 0);
  INFO(slurp(dir / "eval_export.log"));
  CHECK(slurp(dir / "eval_export.log").find("top-1") != std::string::npos);
  CHECK(run(bin + " infer " + (dir / "export").string() + " " + testing::sample_data_dir() + "/val --top 1",
            dir / "infer.log") == 0);
  CHECK(run(bin + " compare-layers " + cfg + " --checkpoint " + ckpt, dir / "cmp.log") == 0);
  CHECK(slurp(dir / "cmp.log").find("layer1.0.add") != std::string::npos);
}

// Post-training quantization of a graph model: qat calibrate of an FP32
// ResNet-20 checkpoint (entropy: every conv output, the network input and
// each residual add's quantizer get a threshold), its export, and the
// integer model's eval equal to the calibrated fake-quant model's.
TEST_CASE("qat calibrate of ResNet-20: thresholds for the adds too, and its export evaluates as calibrated",
          "[graph][quant][ptq]") {
  const fs::path dir = testing::fresh_temp_dir("qat_graph_ptq_", "r20");
  const std::string cfg = (dir / "cfg.yaml").string(), bin = QAT_BINARY;
  write_r20_config(cfg, 1, 6, "{enabled: true}");
  const std::string fp32 = (dir / "fp32").string();
  REQUIRE(run(bin + " train " + cfg + " --set quant.enabled=false --set output.dir=" + fp32, dir / "fp32.log") == 0);
  const fs::path ptq = dir / "ptq";
  REQUIRE(run(bin + " calibrate " + cfg + " --checkpoint " + fp32 + "/best.safetensors --images 64 --out " +
                  ptq.string(),
              dir / "cal.log") == 0);
  const std::string cal = slurp(dir / "cal.log");
  INFO(cal);
  CHECK(cal.find("layer1.0.relu_1.1") != std::string::npos);  // the add+relu's output quantizer
  const std::string pcfg = (ptq / "config.yaml").string(), ckpt = (ptq / "calibrated.safetensors").string();
  REQUIRE(run(bin + " export " + pcfg + " --checkpoint " + ckpt + " --out " + (dir / "export").string(),
              dir / "export.log") == 0);
  REQUIRE(run(bin + " eval " + pcfg + " --checkpoint " + ckpt, dir / "eval_fq.log") == 0);
  REQUIRE(run(bin + " eval " + pcfg + " --checkpoint " + (dir / "export").string(), dir / "eval_int.log") == 0);
  // "..., top-1 X%, top-5 Y%": the same figures from both models on the 100 sample images.
  auto figures = [](const std::string& log) { return log.substr(log.find("top-1")); };
  CHECK(figures(slurp(dir / "eval_fq.log")) == figures(slurp(dir / "eval_int.log")));
}

// qat sensitivity of a graph model: each of ResNet-20's 22 quantized layers
// alone at 4 bits, ranked, and a mixed config that builds; and INT8 training
// of the same network through qat train, resumed bit for bit.
TEST_CASE("qat sensitivity and INT8 training of ResNet-20 through the commands", "[graph][quant][sensitivity]") {
  const fs::path dir = testing::fresh_temp_dir("qat_graph_sens_", "r20");
  const std::string cfg = (dir / "cfg.yaml").string(), bin = QAT_BINARY;
  write_r20_config(cfg, 2, 3, "{enabled: true}");
  const std::string fp32 = (dir / "fp32").string();
  REQUIRE(run(bin + " train " + cfg + " --set quant.enabled=false --set train.epochs=1 --set output.dir=" + fp32,
              dir / "fp32.log") == 0);
  const fs::path sens = dir / "sens";
  REQUIRE(run(bin + " sensitivity " + cfg + " --checkpoint " + fp32 + "/best.safetensors --bits 4 --images 32 " +
                  "--calib-images 32 --out " + sens.string(),
              dir / "sens.log") == 0);
  const std::string table = slurp(sens / "sensitivity.md");
  INFO(table);
  for (const char* layer : {"conv1", "layer1.0.conv1", "layer3.2.conv2", "layer2.0.downsample.0", "fc"})
    CHECK(table.find(std::string("| ") + layer + " ") != std::string::npos);
  REQUIRE(run(bin + " train " + (sens / "mixed.yaml").string() + " --set train.epochs=1 --set output.dir=" +
                  (dir / "mixed").string(),
              dir / "mixed.log") == 0);

  const std::string int8 = " --set quant.int8_training.enabled=true";
  REQUIRE(run(bin + " train " + cfg + int8 + " --set output.dir=" + (dir / "int8").string(), dir / "int8.log") == 0);
  INFO(slurp(dir / "int8.log"));
  CHECK(run(bin + " train " + cfg + int8 + " --set output.dir=" + (dir / "cut").string() + " --stop-after-steps 4",
            dir / "cut1.log") == 130);
  REQUIRE(run(bin + " train " + cfg + int8 + " --resume " + (dir / "cut").string(), dir / "cut2.log") == 0);
  const SafetensorsFile a = load_safetensors((dir / "int8" / "last.safetensors").string());
  const SafetensorsFile b = load_safetensors((dir / "cut" / "last.safetensors").string());
  testing::require_same_tensors(a.tensors, b.tensors);
}
