// `qat calibrate` and `qat sensitivity`: their options (Note [command table]).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/commands.h"
#include "apps/calibrate_cmd.h"
#include "apps/sensitivity_cmd.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace qat::apps {

namespace {
// --calibrator's text as a calibrator, or an error naming the command and the choices.
quant::Calibrator calibrator_of(const std::string& command, const std::string& text) {
  const auto c = enum_from_name<quant::Calibrator>(text);
  if (!c) throw Error(command + ": --calibrator must be one of " + enum_name_list<quant::Calibrator>() + ", got '" +
                      text + "'");
  return *c;
}
}  // namespace

Command calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  auto calibrator_text = std::make_shared<std::string>();
  CalibrateArgs& cal = *args;
  std::string& calibrator = *calibrator_text;
  auto* ca = app.add_subcommand("calibrate",
                                "Post-training quantization: calibrate activation ranges of an FP32 checkpoint on "
                                "training images (TensorRT's calibrators and cache)");
  add_config(ca, cal.config, "Experiment config (YAML) with a quant: section");
  add_checkpoint(ca, cal.checkpoint, "FP32 checkpoint (.safetensors)");
  ca->add_option("--calibrator", calibrator,
                 "Threshold choice: " + qat::enum_name_list<qat::quant::Calibrator>() + " (default entropy)");
  ca->add_option("--percentile", cal.percentile, "Percentile of the percentile calibrator")
      ->capture_default_str()
      ->check(finite_in(1e-9, 100.0));
  ca->add_option("--images", cal.images, "Calibration images from the training set (balanced across classes)")
      ->capture_default_str()
      ->check(kPositive);
  ca->add_option("--cache", cal.cache,
                 "Calibration cache: read when it exists (calibration skipped), else written (default OUT/calibration.cache)");
  ca->add_option("--out", cal.out_dir, "Output folder (default <output.dir>-ptq)");
  ca->add_flag("--compare", cal.compare, "Every calibrator on the same images: val accuracy table and chart");
  add_overrides(ca, cal.overrides);
  return {ca, [args, calibrator_text] {
            if (!calibrator_text->empty()) args->calibrator = calibrator_of("calibrate", *calibrator_text);
            return run_calibrate(*args);
          }};
}

Command sensitivity_command(CLI::App& app) {
  auto args = std::make_shared<SensitivityArgs>();
  auto calibrator_text = std::make_shared<std::string>();
  SensitivityArgs& sens = *args;
  std::string& sens_calibrator = *calibrator_text;
  auto* se = app.add_subcommand("sensitivity",
                                "Which layers can go to low bits: each layer alone at --bits (post-training), a "
                                "ranking, and a mixed-precision config within a budget");
  add_config(se, sens.config, "Experiment config (YAML) with a quant: section");
  add_checkpoint(se, sens.checkpoint, "FP32 checkpoint (.safetensors)");
  se->add_option("--bits", sens.bits, "Low bit width tried per layer")->capture_default_str()->check(CLI::Range(2, 7));
  se->add_option("--high-bits", sens.high_bits, "Bit width of every other layer")->capture_default_str()->check(CLI::Range(3, 8));
  se->add_option("--images", sens.images, "Validation images scored (balanced across classes)")
      ->capture_default_str()
      ->check(kPositive);
  se->add_option("--calib-images", sens.calib_images, "Training images calibrating each variant")
      ->capture_default_str()
      ->check(kPositive);
  se->add_option("--calibrator", sens_calibrator,
                 "Activation thresholds: " + qat::enum_name_list<qat::quant::Calibrator>() + " (default mse)");
  se->add_option("--max-drop", sens.max_drop, "Budget: top-1 points below the high-bit model")
      ->capture_default_str()
      ->check(kNonNegative);
  se->add_option("--finetune-steps", sens.finetune_steps,
                 "Also train each variant this many QAT steps from its calibration before scoring (slower)")
      ->check(kNonNegative);
  se->add_option("--size-mb", sens.size_mb, "Budget instead: MB of weights (1 MB = 10^6 bytes)")->check(kPositive);
  se->add_option("--out", sens.out_dir, "Output folder (default <output.dir>-sensitivity)");
  add_overrides(se, sens.overrides);
  return {se, [args, calibrator_text] {
            if (!calibrator_text->empty()) args->calibrator = calibrator_of("sensitivity", *calibrator_text);
            return run_sensitivity(*args);
          }};
}

}  // namespace qat::apps
