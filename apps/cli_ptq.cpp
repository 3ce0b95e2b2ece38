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

// A post-training command: the experiment config, the FP32 checkpoint and
// --calibrator, the options both take.
template <class Args>
NewCommand<WithCalibratorText<Args>> post_training_command(CLI::App& app, const std::string& name,
                                                           const std::string& description,
                                                           const std::string& default_calibrator) {
  NewCommand<WithCalibratorText<Args>> cmd(app, name, description, "Experiment config (YAML) with a quant: section");
  add_checkpoint(cmd.sub, cmd.args.checkpoint, "FP32 checkpoint (.safetensors)");
  cmd->add_option("--calibrator", cmd.args.calibrator_text,
                  "Activation thresholds: " + qat::enum_name_list<qat::quant::Calibrator>() + " (default " +
                      default_calibrator + ")");
  return cmd;
}

// The command, running run(args) with --calibrator's choice when one was given.
template <class Args, class Report>
Command running_with_calibrator(const NewCommand<WithCalibratorText<Args>>& cmd, int (*run)(const Args&, Report*)) {
  return cmd.running([name = cmd.sub->get_name(), run](WithCalibratorText<Args>& a) {
    if (!a.calibrator_text.empty()) a.calibrator = calibrator_of(name, a.calibrator_text);
    return run(a, nullptr);
  });
}
}  // namespace

Command calibrate_command(CLI::App& app) {
  auto cmd = post_training_command<CalibrateArgs>(
      app, "calibrate",
      "Post-training quantization: calibrate activation ranges of an FP32 checkpoint on training images (TensorRT's "
      "calibrators and cache)",
      "entropy");
  auto& cal = cmd.args;
  add_checked(cmd.sub, "--percentile", cal.percentile, "Percentile of the percentile calibrator",
              finite_in(1e-9, 100.0));
  add_checked(cmd.sub, "--images", cal.images, "Calibration images from the training set (balanced across classes)",
              kPositive);
  cmd->add_option(
      "--cache", cal.cache,
      "Calibration cache: read when it exists (calibration skipped), else written (default OUT/calibration.cache)");
  cmd->add_option("--out", cal.out_dir, "Output folder (default <output.dir>-ptq)");
  cmd->add_flag("--compare", cal.compare, "Every calibrator on the same images: val accuracy table and chart");
  add_overrides(cmd.sub, cal.overrides);
  return running_with_calibrator(cmd, run_calibrate);
}

Command sensitivity_command(CLI::App& app) {
  auto cmd = post_training_command<SensitivityArgs>(
      app, "sensitivity",
      "Which layers can go to low bits: each layer alone at --bits (post-training), a ranking, and a "
      "mixed-precision config within a budget",
      "mse");
  auto& sens = cmd.args;
  add_checked(cmd.sub, "--bits", sens.bits, "Low bit width tried per layer", CLI::Range(2, 7));
  add_checked(cmd.sub, "--high-bits", sens.high_bits, "Bit width of every other layer", CLI::Range(3, 8));
  add_checked(cmd.sub, "--images", sens.images, "Validation images scored (balanced across classes)", kPositive);
  add_checked(cmd.sub, "--calib-images", sens.calib_images, "Training images calibrating each variant", kPositive);
  add_checked(cmd.sub, "--max-drop", sens.max_drop, "Budget: top-1 points below the high-bit model", kNonNegative);
  cmd->add_option("--finetune-steps", sens.finetune_steps,
                  "Also train each variant this many QAT steps from its calibration before scoring (slower)")
      ->check(count_up_to(std::numeric_limits<int64_t>::max()));  // (a larger count was clamped to 2^63 - 1)
  cmd->add_option("--size-mb", sens.size_mb, "Budget instead: MB of weights (1 MB = 10^6 bytes)")->check(kPositive);
  cmd->add_option("--out", sens.out_dir, "Output folder (default <output.dir>-sensitivity)");
  add_overrides(cmd.sub, sens.overrides);
  return running_with_calibrator(cmd, run_sensitivity);
}

}  // namespace qat::apps
