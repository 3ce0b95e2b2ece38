// A prepared network's gradients against PyTorch: the wiring a config drives
// (which quantizer sits where, its gradient scale N, LSQ vs LSQ+ per grid)
// checked end to end, not op by op. Golden: tests/golden/gen_prepared_lsq.py.
#include <algorithm>

#include "tests/test_util.h"

#include "apps/backend_config.h"
#include "apps/config.h"
#include "layers/layers.h"
#include "quant/sim/prepare.h"

using namespace qat;
using namespace qat::quant;

namespace {

// The network of the golden, prepared as `qat train` prepares it from the
// shipped quickstart config switched to LSQ+.
ModulePtr prepared_mlp(const std::string& backend_name, int bits) {
  Generator g(3);
  auto m = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<Linear>(6, 5, g), std::make_shared<ReLU>(),
                             std::make_shared<Linear>(5, 4, g), std::make_shared<ReLU>(),
                             std::make_shared<Linear>(4, 3, g)});
  const std::string configs = std::string(QAT_SOURCE_DIR) + "/configs";
  const apps::ExperimentConfig cfg =
      apps::load_config(configs + "/quickstart_w8a8.yaml",
                        {"quant.method=lsq_plus", "quant.bits=" + std::to_string(bits), "quant.backend=" + backend_name},
                        apps::DataPaths::as_recorded);
  prepare(*m, apps::load_backend(cfg.quant.backend, configs), apps::make_qconfig(cfg.quant));
  m->train();
  return m;
}

std::vector<std::string> names_of(const std::map<std::string, Tensor>& params) {
  std::vector<std::string> n;
  for (auto& [k, v] : params) n.push_back(k);
  return n;
}

}  // namespace

TEST_CASE("a prepared 4-bit LSQ+ network's gradients equal PyTorch's", "[quant][qat][golden]") {
  const SafetensorsFile& f = testing::golden_file("prepared_lsq.safetensors");
  ModulePtr m = prepared_mlp("default", 4);
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : m->named_parameters()) params[name] = p;
  // Exactly the golden's parameters: weights and biases, one step per
  // quantizer, offsets on the affine (activation) grids only.
  std::vector<std::string> golden_names;
  for (const std::string& k : testing::golden_case_names(f, "init.", ""))
    golden_names.push_back(k.substr(5));
  std::sort(golden_names.begin(), golden_names.end());
  REQUIRE(names_of(params) == golden_names);
  {
    NoGradGuard ng;
    m->forward(testing::golden_tensor(f, "x"));  // initialises the quantizers; then the golden values replace them
    for (auto& [name, p] : params) p.copy_(testing::golden_tensor(f, "init." + name));
  }
  for (auto& [name, p] : params) p.zero_grad();
  Tensor x = testing::golden_tensor(f, "x").clone().set_requires_grad(true);
  Tensor y = m->forward(x);
  sum(mul(y, testing::golden_tensor(f, "gy"))).backward();
  // float32 here, float64 there, every rounding decided alike (the golden
  // keeps each quantized value 2e-3 steps away from a boundary).
  testing::require_close(y, testing::golden_tensor(f, "y"), 1e-5, 1e-5, "y");
  testing::require_close(x.grad(), testing::golden_tensor(f, "dx"), 1e-5, 1e-5, "dx");
  for (auto& [name, p] : params)
    testing::require_close(p.grad(), testing::golden_tensor(f, "grad." + name), 1e-5, 1e-5, "grad of " + name);
}

// A symmetric grid has zero point 0; LSQ+ learns no offset there, whatever
// training does to the step (TensorRT's rule, configs/backends/tensorrt.yaml).
TEST_CASE("LSQ+ on symmetric grids learns no offset and keeps zero points at 0", "[quant][qat]") {
  ModulePtr m = prepared_mlp("tensorrt", 8);
  for (auto& [name, p] : m->named_parameters()) {
    INFO(name);
    REQUIRE(name.find("offset") == std::string::npos);
  }
  Generator g(4);
  for (int step = 0; step < 3; ++step) {
    for (auto& [name, p] : m->named_parameters()) p.zero_grad();
    sum(m->forward(Tensor::randn({8, 6}, g))).backward();
    NoGradGuard ng;
    for (auto& [name, p] : m->named_parameters()) p.add_(p.grad(), -0.05f);
  }
  m->forward(Tensor::randn({8, 6}, g));
  for (auto& [name, t] : m->state_dict()) {
    if (name.size() < 11 || name.substr(name.size() - 11) != ".zero_point") continue;
    INFO(name);
    for (int32_t z : testing::int_values(t)) REQUIRE(z == 0);
  }
}
