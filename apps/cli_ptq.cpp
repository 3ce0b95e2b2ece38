// `qat calibrate` and `qat sensitivity`: their options (Note [command table]).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "apps/calibrate_cmd.h"
#include "apps/cli_checks.h"
#include "apps/cli_command.h"
#include "apps/sensitivity_cmd.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace qat::apps {

namespace {
// --calibrator's text as a calibrator, or an error naming the command and the choices.
quant::Calibrator calibrator_of(const std::string& command, const std::string& text) {
  const auto c = enum_from_name<quant::Calibrator>(text);
  if (!c)
    throw Error(command + ": --calibrator must be one of " + enum_name_list<quant::Calibrator>() + ", got '" + text +
                "'");
  return *c;
}

// A command's arguments and its --calibrator text, parsed when it runs.
template <class Args>
struct WithCalibratorText : Args {
  std::string calibrator_text;
};

// Runs run(args) with --calibrator's choice, when one was given.
template <class Args>
int with_calibrator(const std::string& command, WithCalibratorText<Args>& a, int (*run)(const Args&)) {
  if (!a.calibrator_text.empty()) a.calibrator = calibrator_of(command, a.calibrator_text);
  return run(a);
}
}  // namespace

Command calibrate_command(CLI::App& app) {
  NewCommand<WithCalibratorText<CalibrateArgs>> cmd(
      app, "calibrate",
      "Post-training quantization: calibrate activation ranges of an FP32 checkpoint on training images (TensorRT's "
      "calibrators and cache)",
      "Experiment config (YAML) with a quant: section");
  auto& cal = cmd.args;
  std::string& calibrator = cal.calibrator_text;
  add_checkpoint(cmd.sub, cal.checkpoint, "FP32 checkpoint (.safetensors)");
  cmd->add_option("--calibrator", calibrator,
                  "Threshold choice: " + qat::enum_name_list<qat::quant::Calibrator>() + " (default entropy)");
  cmd->add_option("--percentile", cal.percentile, "Percentile of the percentile calibrator")
      ->capture_default_str()
      ->check(finite_in(1e-9, 100.0));
  cmd->add_option("--images", cal.images, "Calibration images from the training set (balanced across classes)")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option(
      "--cache", cal.cache,
      "Calibration cache: read when it exists (calibration skipped), else written (default OUT/calibration.cache)");
  cmd->add_option("--out", cal.out_dir, "Output folder (default <output.dir>-ptq)");
  cmd->add_flag("--compare", cal.compare, "Every calibrator on the same images: val accuracy table and chart");
  add_overrides(cmd.sub, cal.overrides);
  return cmd.running([](auto& a) {
    return with_calibrator<CalibrateArgs>("calibrate", a, [](const CalibrateArgs& c) { return run_calibrate(c); });
  });
}

Command sensitivity_command(CLI::App& app) {
  NewCommand<WithCalibratorText<SensitivityArgs>> cmd(
      app, "sensitivity",
      "Which layers can go to low bits: each layer alone at --bits (post-training), a ranking, and a "
      "mixed-precision config within a budget",
      "Experiment config (YAML) with a quant: section");
  auto& sens = cmd.args;
  std::string& sens_calibrator = sens.calibrator_text;
  add_checkpoint(cmd.sub, sens.checkpoint, "FP32 checkpoint (.safetensors)");
  cmd->add_option("--bits", sens.bits, "Low bit width tried per layer")->capture_default_str()->check(CLI::Range(2, 7));
  cmd->add_option("--high-bits", sens.high_bits, "Bit width of every other layer")
      ->capture_default_str()
      ->check(CLI::Range(3, 8));
  cmd->add_option("--images", sens.images, "Validation images scored (balanced across classes)")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--calib-images", sens.calib_images, "Training images calibrating each variant")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--calibrator", sens_calibrator,
                  "Activation thresholds: " + qat::enum_name_list<qat::quant::Calibrator>() + " (default mse)");
  cmd->add_option("--max-drop", sens.max_drop, "Budget: top-1 points below the high-bit model")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--finetune-steps", sens.finetune_steps,
                  "Also train each variant this many QAT steps from its calibration before scoring (slower)")
      ->check(kNonNegative);
  cmd->add_option("--size-mb", sens.size_mb, "Budget instead: MB of weights (1 MB = 10^6 bytes)")->check(kPositive);
  cmd->add_option("--out", sens.out_dir, "Output folder (default <output.dir>-sensitivity)");
  add_overrides(cmd.sub, sens.overrides);
  return cmd.running([](auto& a) {
    return with_calibrator<SensitivityArgs>("sensitivity", a,
                                            [](const SensitivityArgs& s) { return run_sensitivity(s); });
  });
}

}  // namespace qat::apps
