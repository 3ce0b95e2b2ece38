#pragma once
// `qat train` and `qat eval`.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/config.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "layers/module.h"

namespace qat::apps {

// The model of a config: the float model, optionally started from a float
// checkpoint (quant.init_from, when load_init), then prepared for QAT when
// quant.enabled (printing the prepared layers when print).
ModulePtr build_model(const ExperimentConfig& cfg, bool load_init, bool print);

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set key.path=value
  std::string resume_dir;              // --resume RUN_DIR
  int64_t stop_after_steps = 0;        // >0: behave as if Ctrl-C came after this many steps (tests)
  std::string device = {};             // --device cpu|cuda: overrides train.device ("" keeps the config's)
  bool sweep_member = false;           // run by qat sweep (the config's sweep: section is its business)
};

// Returns the process exit code (0 done, 130 interrupted by Ctrl-C).
int run_train(const TrainArgs& args);

// While one lives, Ctrl-C and SIGTERM raise a flag instead of ending the
// process (a second signal ends it at once, status 130). Scopes nest: the
// outermost installs the handlers and clears the flag, so a signal that
// arrives between a sweep's runs, or while one validates, is still seen.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  static bool interrupted();

 private:
  void (*prev_int_)(int) = nullptr;
  void (*prev_term_)(int) = nullptr;
};

struct EvalArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoint;
};

struct EvalSummary {
  double loss = 0, top1 = 0, top5 = 0;
  int64_t images = 0;
  int64_t epoch = 0;  // epochs the checkpoint had trained
};

// Top-1/top-5/loss of a model (or any logits function) over a loader's epoch.
// The images go to `device` (where the model is); the logits come back to the
// CPU for the loss and the counts.
EvalSummary evaluate(Module& model, data::DataLoader& loader, int64_t num_classes, Device device = Device::cpu);
EvalSummary evaluate(const std::function<Tensor(const Tensor&)>& forward, data::DataLoader& loader,
                     int64_t num_classes, Device device = Device::cpu);
data::TransformSpec transform_spec(const DataConfig& d);
// The ImageFolder at `root` with the config's bad-image policy and decode limits.
data::ImageFolder image_folder(const DataConfig& d, const std::string& root);
data::LoaderOptions loader_options(const ExperimentConfig& cfg, bool train);

// Loads the checkpoint's model and evaluates it on the config's val set.
EvalSummary eval_checkpoint(const EvalArgs& args);
int run_eval(const EvalArgs& args);

}  // namespace qat::apps
