#pragma once
// `qat train` and `qat eval`.
#include <string>
#include <vector>

namespace qat::apps {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set key.path=value
  std::string resume_dir;              // --resume RUN_DIR
};

// Returns the process exit code (0 done, 130 interrupted by Ctrl-C).
int run_train(const TrainArgs& args);

struct EvalArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoint;
};

int run_eval(const EvalArgs& args);

}  // namespace qat::apps
