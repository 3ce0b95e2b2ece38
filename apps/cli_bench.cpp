// `qat bench`: its options (Note [command table]).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/commands.h"
#include "apps/bench.h"
#include "apps/config.h"
#include "core/enum_names.h"
#include "models/models.h"
#include "quant/integer/int8_gemm.h"
#include "core/error.h"

namespace qat::apps {

Command bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchOptions>();
  BenchOptions& bench = *args;
  auto* b = app.add_subcommand("bench", "Measure training-step (or, with --infer, inference) throughput on synthetic data");
  std::string models;
  for (auto& n : qat::model_names()) models += (models.empty() ? "" : ", ") + n;
  b->add_option("--model", bench.model, "Model name (" + models + "), a model file (.yaml) or an ONNX model (.onnx)")->capture_default_str();
  b->add_option("--stem", bench.stem, "model.stem of resnet18 and mobilenet_v2: imagenet, or small for 32 px")
      ->capture_default_str()
      ->check(CLI::IsMember({"imagenet", "small"}));
  b->add_option("--res", bench.res, "Input resolution (square)")->capture_default_str()->check(CLI::Range(32, 4096));
  b->add_option("--batch", bench.batch, "Batch size")->capture_default_str()->check(CLI::Range(1, 4096));
  b->add_option("--classes", bench.classes, "Number of classes")->capture_default_str()->check(kPositive);
  b->add_option("--threads", bench.threads, "Threads for OpenMP and OpenBLAS (0: all cores)")
      ->capture_default_str()
      ->check(count_up_to(kMaxThreads));
  b->add_option("--steps", bench.steps, "Timed steps")->capture_default_str()->check(kPositive);
  b->add_option("--warmup", bench.warmup, "Untimed warm-up steps")->capture_default_str()->check(kNonNegative);
  b->add_option("--config", bench.config,
                "Experiment config with a quant: section: also time the prepared QAT model")
      ->check(CLI::ExistingFile);
  b->add_flag("--verbose", bench.verbose, "Print the loss of every step");
  b->add_flag("--infer", bench.infer,
              "Time inference: FP32 eval forward vs the frozen integer model (--steps passes, median)");
  b->add_option("--checkpoint", bench.checkpoint, "With --infer and --config: freeze this QAT checkpoint")
      ->check(CLI::ExistingPath);
  b->add_flag("!--no-profile", bench.profile, "Skip the per-op time breakdown");
  b->add_flag("!--no-weight-lookahead", bench.weight_lookahead,
              "QAT: fake-quantize every weight at its forward, not ahead inside the optimizer step (to time the difference)");
  b->add_option("--device", bench.device,
                "Where the training steps (or, with --infer, both models) run: " +
                    qat::enum_name_list<qat::Device>() +
                    " (cuda as train.device: refused, naming why, where the step cannot run on the GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  b->add_option("--optimizer", bench.optimizer,
                "The training steps' update: sgd (momentum 0.9, lr 0.01) or adamw (lr 1e-3); weight decay 5e-4")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adamw"}));
  b->add_option("--int8-kernel", bench.int8_kernel,
                "With --infer: the integer GEMM kernel (" + qat::enum_name_list<qat::quant::GemmKernel>() +
                    "; default: the best this CPU runs)");
  return {b, [args] { return run_bench(*args); }};
}

}  // namespace qat::apps
