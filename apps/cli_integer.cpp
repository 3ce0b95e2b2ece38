// `qat export`, `qat infer` and `qat compare-layers`: their options (Note [command table]).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/commands.h"
#include "apps/config.h"
#include "apps/integer_cmd.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace qat::apps {

Command export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  ExportArgs& exp = *args;
  auto* ex = app.add_subcommand("export", "Freeze a QAT checkpoint into an integer model and write it to a folder");
  add_config(ex, exp.config, "Experiment config (YAML) with a quant: section");
  add_checkpoint(ex, exp.checkpoint, "QAT checkpoint (.safetensors)");
  ex->add_option("--out", exp.out_dir, "Output folder (manifest.yaml + weights.safetensors), or the .onnx file")
      ->required();
  ex->add_option("--format", exp.format, "qat (qat's own folder) or onnx (QDQ, opset 13)")->capture_default_str();
  ex->add_option("--onnx-profile", exp.onnx_profile,
                 "standard, or tensorrt (int8 activations, zero points 0: TensorRT's explicit quantization)")
      ->capture_default_str();
  ex->add_flag("--onnx-int32-bias", exp.onnx_int32_bias,
               "int32 biases + DequantizeLinear (ONNX Runtime's integer kernels; drops qat's bias fraction)");
  add_overrides(ex, exp.overrides);
  return {ex, [args] { return run_export(*args); }};
}

Command infer_command(CLI::App& app) {
  auto args = std::make_shared<InferArgs>();
  InferArgs& inf = *args;
  auto* in = app.add_subcommand("infer", "Classify images with an exported integer model (top classes)");
  in->add_option("export_dir", inf.export_dir, "Folder written by qat export")->required()->check(CLI::ExistingDirectory);
  in->add_option("input", inf.input, "An image file, or a folder searched recursively")->required()->check(CLI::ExistingPath);
  in->add_option("--top", inf.top, "Classes to print per image")->capture_default_str()->check(kPositive);
  in->add_option("--threads", inf.threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(count_up_to(kMaxThreads));
  in->add_option("--save", inf.save,
                 "Also write PREFIX.inputs.f32, PREFIX.logits.f32, PREFIX.paths.txt (checks of other runtimes)");
  in->add_option("--device", inf.device,
                 "Where the integer model runs: " + qat::enum_name_list<qat::Device>() +
                     " (cuda: the same logits bit for bit, on the GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return {in, [args] { return run_infer(*args); }};
}

Command compare_layers_command(CLI::App& app) {
  auto args = std::make_shared<CompareLayersArgs>();
  CompareLayersArgs& cl = *args;
  auto* cls = app.add_subcommand("compare-layers",
                                 "Fake-quant vs integer model, layer by layer: output differences in LSBs");
  add_config(cls, cl.config, "Experiment config (YAML) with a quant: section");
  add_checkpoint(cls, cl.checkpoint, "QAT checkpoint (.safetensors)");
  cls->add_option("--images", cl.images, "Validation images to compare (0: all)")->capture_default_str()->check(kNonNegative);
  add_overrides(cls, cl.overrides);
  return {cls, [args] { return run_compare_layers(*args); }};
}

}  // namespace qat::apps
