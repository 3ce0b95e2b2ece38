#include "apps/compare_speed.h"
#include "apps/model_file.h"

#include <filesystem>

#include "apps/bench.h"
#include "apps/config.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/threads.h"
#include "models/checkpoint.h"
#include "models/models.h"
#include "quant/convert/freeze.h"

namespace qat::apps {

void measure_speed(std::vector<RunSummary>& runs, const std::vector<std::string>& run_dirs, int batch) {
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string ckpt = run_dirs[i] + "/best.safetensors";
    if (!std::filesystem::exists(ckpt)) continue;
    const ExperimentConfig cfg = load_config(run_dirs[i] + "/config.yaml", {}, DataPaths::as_recorded);
    set_num_threads(static_cast<int>(cfg.train.threads));
    BenchOptions opt;
    opt.batch = batch;
    opt.warmup = 2;
    opt.steps = 5;
    Generator g(1);
    const Tensor x = Tensor::randn({batch, 3, cfg.data.image_size, cfg.data.image_size}, g);
    NoGradGuard ng;
    const std::string label = runs[i].name;
    if (!cfg.quant.enabled) {
      ModulePtr m = make_configured_model(cfg.model, 0);
      load_model_checked(ckpt, *m, nullptr);
      m->eval();
      runs[i].infer_img_s = time_inference([&](const Tensor& t) { return m->forward(t); }, x, opt, label.c_str());
    } else {
      ModulePtr m = build_model(cfg, false, false);
      load_run_state(ckpt, *m, nullptr, &cfg, ConfigMatch::quant);
      const quant::IntegerModel im = quant::freeze(*m);
      runs[i].infer_img_s = time_inference([&](const Tensor& t) { return im.forward(t); }, x, opt, label.c_str());
    }
  }
}

}  // namespace qat::apps
