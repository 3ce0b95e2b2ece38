// `qat train`, `qat eval` and `qat sweep`: their options (Note [command table]).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/cli_command.h"
#include "apps/sweep.h"
#include "apps/train.h"
#include "core/error.h"

namespace qat::apps {

Command train_command(CLI::App& app) {
  NewCommand<TrainArgs> cmd(app, "train", "Train a model from a YAML experiment config", "Experiment config (YAML)");
  TrainArgs& train = cmd.args;
  add_overrides(cmd.sub, train.overrides, "Override a config key, e.g. --set train.lr=0.01 (repeatable)");
  cmd->add_option("--resume", train.resume_dir, "Continue the run in RUN_DIR from its last.safetensors")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--stop-after-steps", train.stop_after_steps,
                  "Stop as if interrupted after this many steps, saving last.safetensors (tests, partial runs)")
      ->check(kPositive);
  cmd->add_option("--device", train.device,
                  "Where to train: " + qat::enum_name_list<qat::Device>() +
                      " (overrides train.device; cuda is refused, "
                      "naming why, until the whole training step runs on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return cmd.running([](auto& a) { return run_train(a); });
}

Command eval_command(CLI::App& app) {
  NewCommand<EvalArgs> cmd(app, "eval", "Evaluate a checkpoint on the config's validation set",
                           "Experiment config (YAML)");
  add_checkpoint(cmd.sub, cmd.args.checkpoint, "Checkpoint file (.safetensors), or a `qat export` folder");
  add_overrides(cmd.sub, cmd.args.overrides);
  return cmd.running([](auto& a) { return run_eval(a); });
}

Command sweep_command(CLI::App& app) {
  NewCommand<SweepArgs> cmd(app, "sweep", "Train every combination of a config's sweep: lists (resumable)",
                            "Experiment config with a sweep: section");
  add_overrides(cmd.sub, cmd.args.overrides, "Override a config key for every run (repeatable)");
  cmd->add_option("--baseline", cmd.args.baselines, "Run directories to add to the final table (e.g. the FP32 run)")
      ->check(CLI::ExistingDirectory);
  return cmd.running([](auto& a) { return run_sweep(a); });
}

}  // namespace qat::apps
