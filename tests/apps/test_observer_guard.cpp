// quant.observer_off_epoch: 1 turns the observers off before the first
// batch: refused when the config is loaded (also from a calibration: its
// weight quantizers observe the weights as they train, and would never see
// one); and the non-finite guard tells an observer that never observed apart
// from a run that diverged.
#include <filesystem>
#include <limits>

#include "tests/test_util.h"

#include "apps/calibrate_cmd.h"
#include "apps/config.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/autograd.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

TEST_CASE("quant.observer_off_epoch 1 is refused when the config is loaded, naming the key and what to do",
          "[config]") {
  const fs::path dir = testing::fresh_temp_dir("qat_obsoff_", "cfg");
  const std::string fp32_cfg = testing::write_sample_config(dir, "fp32.yaml", "", 1, 2, "fp32");
  REQUIRE(run_train({fp32_cfg, {}, ""}) == 0);
  const std::string fp32 = (dir / "fp32" / "best.safetensors").string();
  const std::string cfg = testing::write_sample_config(
      dir, "q.yaml", "quant: {enabled: true, method: minmax, observer_off_epoch: 1}\n", 1, 2, "q");
  const std::string refused = cfg + ", line 16: quant.observer_off_epoch: 1 turns the observers off before they "
                              "see any data, so the minmax weight quantizers would never get a range";
  REQUIRE_THROWS_WITH(load_config(cfg), Contains(refused) && Contains("use 2 or later"));
  REQUIRE_THROWS_WITH(load_config(cfg, {"quant.init_from=" + fp32}), Contains(refused));
  CHECK(load_config(cfg, {"quant.observer_off_epoch=2"}).quant.observer_off_epoch == 2);
  CHECK(load_config(cfg, {"quant.method=lsq"}).quant.method == quant::QuantMethod::lsq);
  // A calibration does not make it safe: QAT from one takes the activations'
  // scales, and its weight quantizers observe the weights as they train (run
  // from one with the observers off at once, the guard below stopped it on
  // features.0.weight_fake_quant.min_val).
  CalibrateArgs c;
  c.config = cfg;
  c.overrides = {"quant.observer_off_epoch=2"};
  c.checkpoint = fp32;
  c.images = 16;
  c.out_dir = (dir / "ptq").string();
  REQUIRE(run_calibrate(c) == 0);
  const std::string calibrated = (dir / "ptq" / "calibrated.safetensors").string();
  REQUIRE_THROWS_WITH(load_config(cfg, {"quant.init_from=" + calibrated}), Contains(refused));
}

TEST_CASE("never_observed tells an observer that never saw data from a diverged value", "[e2e]") {
  const fs::path dir = testing::fresh_temp_dir("qat_obsoff_", "never");
  const ExperimentConfig cfg = load_config(
      testing::write_sample_config(dir, "q.yaml", "quant: {enabled: true, method: minmax}\n", 1, 2, "q"));
  ModulePtr model = build_model(cfg, false, false);
  const std::string range = "features.0.activation_post_process.min_val";
  REQUIRE(first_non_finite(*model, nullptr).find("_val") != std::string::npos);  // the empty ranges are infinite
  CHECK(never_observed(*model, range));
  CHECK(never_observed(*model, "features.0.activation_post_process.max_val"));
  CHECK_FALSE(never_observed(*model, "features.0.conv.weight"));
  {
    NoGradGuard ng;
    model->forward(Tensor::ones({2, 3, 32, 32}));
  }
  CHECK_FALSE(never_observed(*model, range));
  for (auto& [name, t] : model->named_buffers())
    if (name == range) t.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(never_observed(*model, range));  // NaN: diverged, not unobserved
}
