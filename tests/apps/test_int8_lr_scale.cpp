// INT8 training's error-sensitive learning rate, held by its effect on the
// weights (issue 40): after one SGD step from the same start, an INT8
// layer's weight and bias moved phi(d) times as far as with lr_scaling off,
// phi(d) = max(exp(-alpha d), beta) with d the WEIGHT gradient's distance of
// that step; BatchNorm's parameters moved exactly as far; and with
// lr_scaling off the step is the plain one (equal to phi = 1).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

#include "apps/config.h"
#include "apps/train.h"
#include "quant/sim/int8_training.h"

using namespace qat;
using namespace qat::apps;
namespace fs = std::filesystem;

namespace {

// SmallCNN, INT8 training with 4-bit gradients (a distance large enough that
// phi is well below 1, and alpha small enough that it is not beta), one SGD
// step without momentum or weight decay.
std::string int8_config(const fs::path& dir, const std::string& name, const std::string& lr_scaling) {
  return testing::write_sample_config(
      dir, name,
      "quant:\n  enabled: true\n  int8_training:\n    enabled: true\n    gradient_bits: 4\n"
      "    lr_scaling: " + lr_scaling + "\n",
      1, 1, name.substr(0, name.find('.')), "  momentum: 0\n  weight_decay: 0\n");
}

std::map<std::string, std::vector<float>> model_after(const fs::path& run) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [k, t] : testing::checkpoint_model_tensors((run / "last.safetensors").string()))
    if (t.dtype() == DType::f32) out[k.substr(6)] = t.to_vector();  // "model." off
  return out;
}

nlohmann::json int8_log(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line).at("int8");
}

}  // namespace

TEST_CASE("INT8 training scales an INT8 layer's step by phi of its weight gradient's distance, and nothing else",
          "[e2e][int8train]") {
  const fs::path dir = testing::fresh_temp_dir("qat_lrscale_", "runs");
  const std::string a = int8_config(dir, "a.yaml", "{enabled: true, alpha: 5, beta: 0.1}");
  const std::string b = int8_config(dir, "b.yaml", "{enabled: false, alpha: 5, beta: 0.1}");
  const std::string c = int8_config(dir, "c.yaml", "{enabled: true, alpha: 0, beta: 0.1}");  // phi = 1
  for (const std::string& cfg : {a, b, c}) REQUIRE(run_train({cfg, {}, ""}) == 0);
  const auto wa = model_after(dir / "a"), wb = model_after(dir / "b"), wc = model_after(dir / "c");

  // The start they share, and which parameters belong to INT8 layers.
  const ExperimentConfig cfg = load_config(a);
  ModulePtr start = build_model(cfg, false, false);
  // Which parameters an INT8 layer's phi must scale, by name (not by asking
  // the code under test): the layer's own weight and bias.
  std::vector<std::string> int8_names;
  for (const quant::Int8Layer& l : quant::int8_layers(*start)) int8_names.push_back(l.name);
  auto layer_of = [&](const std::string& param) -> std::string {
    for (const std::string& l : int8_names)
      if (param == l + ".weight" || param == l + ".bias") return l;
    return "";
  };
  const nlohmann::json log = int8_log(dir / "a");
  REQUIRE(int8_names == std::vector<std::string>{"features.0", "features.4", "fc"});

  int64_t scaled = 0, plain = 0;
  for (const auto& [name, p] : start->named_parameters()) {
    INFO(name);
    const std::vector<float> w0 = p.to_vector(), &after_a = wa.at(name), &after_b = wb.at(name),
                             &after_c = wc.at(name);
    // lr_scaling off is the plain step: that of phi = 1, bit for bit.
    CHECK(after_b == after_c);
    const std::string layer = layer_of(name);
    if (layer.empty()) {  // BN, and the float layers: not scaled
      CHECK(after_a == after_b);
      ++plain;
      continue;
    }
    const double d = log.at(layer).at("distance_dw").get<double>();
    const double phi = std::max(std::exp(-5.0 * d), 0.1);
    INFO("layer " << layer << ": distance_dw " << d << ", phi " << phi);
    REQUIRE(phi < 0.95);  // (the effect is there to see)
    REQUIRE(phi > 0.1);
    CHECK(log.at(layer).at("lr_scale").get<double>() == Approx(phi).epsilon(1e-5));
    int64_t compared = 0;
    for (size_t i = 0; i < w0.size(); ++i) {
      const double step_a = double(w0[i]) - after_a[i], step_b = double(w0[i]) - after_b[i];
      // Each step is rounded once where it meets the weight: compare only
      // steps a thousand times that rounding (their ratio then holds to 1e-3).
      const double ulp = std::nextafter(std::fabs(w0[i]), INFINITY) - std::fabs(w0[i]);
      if (std::fabs(step_b) < 1e3 * ulp) continue;
      ++compared;
      CHECK(step_a / step_b == Approx(phi).epsilon(2e-3));
    }
    CHECK(compared * 2 > static_cast<int64_t>(w0.size()));
    ++scaled;
  }
  CHECK(scaled == 4);  // features.0.weight, features.4.weight, fc.weight, fc.bias (the convs' BN is folded)
  CHECK(plain > 0);
}
