// `qat bench`: its options (Note [command table]).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "apps/bench.h"
#include "apps/cli_checks.h"
#include "apps/cli_command.h"
#include "apps/config.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "models/models.h"
#include "quant/integer/int8_gemm.h"

namespace qat::apps {

Command bench_command(CLI::App& app) {
  NewCommand<BenchOptions> cmd(app, "bench",
                               "Measure training-step (or, with --infer, inference) throughput on synthetic data");
  BenchOptions& bench = cmd.args;
  std::string models;
  for (auto& n : qat::model_names()) models += (models.empty() ? "" : ", ") + n;
  cmd->add_option("--model", bench.model, "Model name (" + models + "), a model file (.yaml) or an ONNX model (.onnx)")
      ->capture_default_str();
  add_checked(cmd.sub, "--stem", bench.stem, "model.stem of resnet18 and mobilenet_v2: imagenet, or small for 32 px",
              CLI::IsMember({"imagenet", "small"}));
  add_checked(cmd.sub, "--res", bench.res, "Input resolution (square)", CLI::Range(32, 4096));
  add_checked(cmd.sub, "--batch", bench.batch, "Batch size", CLI::Range(1, 4096));
  add_checked(cmd.sub, "--classes", bench.classes, "Number of classes", kPositive);
  add_checked(cmd.sub, "--threads", bench.threads, "Threads for OpenMP and OpenBLAS (0: all cores)",
              count_up_to(kMaxThreads));
  add_checked(cmd.sub, "--steps", bench.steps, "Timed steps", kPositive);
  add_checked(cmd.sub, "--warmup", bench.warmup, "Untimed warm-up steps", kNonNegative);
  cmd->add_option("--config", bench.config, "Experiment config with a quant: section: also time the prepared QAT model")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--verbose", bench.verbose, "Print the loss of every step");
  cmd->add_flag("--infer", bench.infer,
                "Time inference: FP32 eval forward vs the frozen integer model (--steps passes, median)");
  cmd->add_option("--checkpoint", bench.checkpoint, "With --infer and --config: freeze this QAT checkpoint")
      ->check(CLI::ExistingPath);
  cmd->add_flag("!--no-profile", bench.profile, "Skip the per-op time breakdown");
  cmd->add_flag(
      "!--no-weight-lookahead", bench.weight_lookahead,
      "QAT: fake-quantize every weight at its forward, not ahead inside the optimizer step (to time the difference)");
  add_checked(cmd.sub, "--device", bench.device,
              "Where the training steps (or, with --infer, both models) run: " + qat::enum_name_list<qat::Device>() +
                  " (cuda as train.device: refused, naming why, where the step cannot run on the GPU)",
              CLI::IsMember({"cpu", "cuda"}));
  add_checked(cmd.sub, "--optimizer", bench.optimizer,
              "The training steps' update: sgd (momentum 0.9, lr 0.01) or adamw (lr 1e-3); weight decay 5e-4",
              CLI::IsMember({"sgd", "adamw"}));
  cmd->add_option("--int8-kernel", bench.int8_kernel,
                  "With --infer: the integer GEMM kernel (" + qat::enum_name_list<qat::quant::GemmKernel>() +
                      "; default: the best this CPU runs)");
  return cmd.running([](auto& a) { return run_bench(a); });
}

}  // namespace qat::apps
