// A measurement, not a test (hidden: ctest does not list it; run by hand):
// for INT8 training's weight-gradient quantizer, the direction error of the
// gradient actually applied (stochastic rounding) against the one the clip
// search minimises (nearest rounding), and the clip a search under
// stochastic rounding would pick. It answers issue 40's question (search
// under the rounding in use, or keep it) on a 4-bit-gradient run:
//   QAT_MEASURE_CONFIG=configs/alexnet_int8_imagenette.yaml
//   QAT_MEASURE_CHECKPOINTS=init,runs/g4/last.safetensors
//   build/qat_tests "[.measure]"
// One batch per checkpoint (train mode), every INT8 layer; prints a table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "tests/test_util.h"

#include "apps/config.h"
#include "apps/ptq.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/ops.h"
#include "quant/int8_training/grad_quant.h"
#include "quant/sim/int8_training.h"

using namespace qat;
using namespace qat::apps;

namespace {

double stochastic_distance(const std::vector<float>& g, float clip, int bits, uint64_t key) {
  std::vector<int8_t> q(g.size());
  return quant::cosine_distance(
      quant::quantize_grad(g.data(), static_cast<int64_t>(g.size()), clip, bits, quant::GradRounding::stochastic, key,
                           0, q.data()));
}

}  // namespace

TEST_CASE("measure: the applied (stochastic) gradient's distance against the searched (nearest) one", "[.measure]") {
  const char* config = std::getenv("QAT_MEASURE_CONFIG");
  const char* checkpoints = std::getenv("QAT_MEASURE_CHECKPOINTS");
  if (!config || !checkpoints) {
    WARN("set QAT_MEASURE_CONFIG and QAT_MEASURE_CHECKPOINTS (comma-separated; 'init': the initial weights)");
    return;
  }
  const ExperimentConfig cfg = load_config(config, {"quant.int8_training.gradient_bits=4"});
  const int bits = cfg.quant.int8_training.grad.bits;
  const double alpha = cfg.quant.int8_training.grad.alpha, beta = cfg.quant.int8_training.grad.beta;
  auto phi = [&](double d) { return quant::lr_scale_for(d, alpha, beta); };
  const data::ImageFolder train = image_folder(cfg.data, cfg.data.train);
  const ImageSet batch = load_image_set(train, balanced_indices(train, cfg.train.batch_size, 7), transform_spec(cfg.data));
  std::printf("%d-bit gradients, phi(d) = max(exp(-%g d), %g); clips as a fraction of max|g|\n", bits, alpha, beta);
  std::printf("%-18s %-13s %8s %9s %9s %7s %8s %9s %9s %9s %9s\n", "checkpoint", "layer", "c_near", "d_near",
              "d_stoch", "ratio", "c_stoch", "d_stoch*", "phi_now", "phi_srch*", "phi_near");
  std::stringstream list(checkpoints);
  for (std::string ckpt; std::getline(list, ckpt, ',');) {
    ModulePtr model = build_model(cfg, false, false);
    if (ckpt != "init") load_run_state(ckpt, *model, nullptr, &cfg, ConfigMatch::quant);
    const auto layers = quant::int8_layers(*model);
    for (const auto& l : layers) l.state->keep_last = true;
    model->train();
    cross_entropy(model->forward(batch.images), batch.labels).backward();
    for (const auto& l : layers) {
      const std::vector<float>& g = l.state->last_dy;
      REQUIRE(!g.empty());
      float m = 0;
      for (float v : g) m = std::max(m, std::fabs(v));
      const int64_t n = static_cast<int64_t>(g.size());
      const float c_near = quant::search_clip(g.data(), n, bits).clip;
      const double d_near = quant::clip_cosine_distance(g.data(), n, c_near, bits);
      const double d_stoch = stochastic_distance(g, c_near, bits, 11);
      // The clip a search under stochastic rounding finds: 96 clips geometric in (max/1000, max].
      float c_best = m;
      double d_best = 2;
      for (int k = 0; k <= 96; ++k) {
        const float c = m * static_cast<float>(std::pow(1000.0, -static_cast<double>(k) / 96.0 * 1.0));
        const double d = stochastic_distance(g, c, bits, 11);
        if (d < d_best) d_best = d, c_best = c;
      }
      std::printf("%-18s %-13s %8.4f %9.5f %9.5f %7.2f %8.4f %9.5f %9.3f %9.3f %9.3f\n",
                  ckpt == "init" ? "init" : ckpt.substr(ckpt.rfind('/') + 1).c_str(), l.name.c_str(), c_near / m,
                  d_near, d_stoch, d_stoch / std::max(d_near, 1e-12), c_best / m, d_best, phi(d_stoch), phi(d_best),
                  phi(d_near));
    }
  }
}
