#pragma once
// `qat train` and `qat eval`.
#include <cstdint>
#include <string>
#include <vector>

namespace qat::apps {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set key.path=value
  std::string resume_dir;              // --resume RUN_DIR
  int64_t stop_after_steps = 0;        // >0: behave as if Ctrl-C came after this many steps (tests)
};

// Returns the process exit code (0 done, 130 interrupted by Ctrl-C).
int run_train(const TrainArgs& args);

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

// Loads the checkpoint's model and evaluates it on the config's val set.
EvalSummary eval_checkpoint(const EvalArgs& args);
int run_eval(const EvalArgs& args);

}  // namespace qat::apps
