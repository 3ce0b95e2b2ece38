// `qat train`, `qat eval` and `qat sweep`: their options (Note [command table]).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/commands.h"
#include "apps/sweep.h"
#include "apps/train.h"
#include "core/error.h"

namespace qat::apps {

Command train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  TrainArgs& train = *args;
  auto* t = app.add_subcommand("train", "Train a model from a YAML experiment config");
  add_config(t, train.config, "Experiment config (YAML)");
  add_overrides(t, train.overrides, "Override a config key, e.g. --set train.lr=0.01 (repeatable)");
  t->add_option("--resume", train.resume_dir, "Continue the run in RUN_DIR from its last.safetensors")
      ->check(CLI::ExistingDirectory);
  t->add_option("--stop-after-steps", train.stop_after_steps,
                "Stop as if interrupted after this many steps, saving last.safetensors (tests, partial runs)")
      ->check(kPositive);
  t->add_option("--device", train.device,
                "Where to train: " + qat::enum_name_list<qat::Device>() + " (overrides train.device; cuda is refused, "
                "naming why, until the whole training step runs on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return {t, [args] { return run_train(*args); }};
}

Command eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  EvalArgs& eval = *args;
  auto* ev = app.add_subcommand("eval", "Evaluate a checkpoint on the config's validation set");
  add_config(ev, eval.config, "Experiment config (YAML)");
  add_checkpoint(ev, eval.checkpoint, "Checkpoint file (.safetensors), or a `qat export` folder");
  add_overrides(ev, eval.overrides);
  return {ev, [args] { return run_eval(*args); }};
}

Command sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  SweepArgs& sweep = *args;
  auto* sw = app.add_subcommand("sweep", "Train every combination of a config's sweep: lists (resumable)");
  add_config(sw, sweep.config, "Experiment config with a sweep: section");
  add_overrides(sw, sweep.overrides, "Override a config key for every run (repeatable)");
  sw->add_option("--baseline", sweep.baselines, "Run directories to add to the final table (e.g. the FP32 run)")
      ->check(CLI::ExistingDirectory);
  return {sw, [args] { return run_sweep(*args); }};
}

}  // namespace qat::apps
