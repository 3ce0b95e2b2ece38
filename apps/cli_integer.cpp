// `qat export`, `qat infer` and `qat compare-layers`: their options (Note [command table]).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/cli_command.h"
#include "apps/config.h"
#include "apps/integer_cmd.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace qat::apps {

Command export_command(CLI::App& app) {
  NewCommand<ExportArgs> cmd(app, "export", "Freeze a QAT checkpoint into an integer model and write it to a folder",
                             "Experiment config (YAML) with a quant: section");
  ExportArgs& exp = cmd.args;
  add_checkpoint(cmd.sub, exp.checkpoint, "QAT checkpoint (.safetensors)");
  cmd->add_option("--out", exp.out_dir, "Output folder (manifest.yaml + weights.safetensors), or the .onnx file")
      ->required();
  cmd->add_option("--format", exp.format, "qat (qat's own folder) or onnx (QDQ, opset 13)")->capture_default_str();
  cmd->add_option("--onnx-profile", exp.onnx_profile,
                  "standard, or tensorrt (int8 activations, zero points 0: TensorRT's explicit quantization)")
      ->capture_default_str();
  cmd->add_flag("--onnx-int32-bias", exp.onnx_int32_bias,
                "int32 biases + DequantizeLinear (ONNX Runtime's integer kernels; drops qat's bias fraction)");
  add_overrides(cmd.sub, exp.overrides);
  return cmd.running([](auto& a) { return run_export(a); });
}

Command infer_command(CLI::App& app) {
  NewCommand<InferArgs> cmd(app, "infer", "Classify images with an exported integer model (top classes)");
  InferArgs& inf = cmd.args;
  cmd->add_option("export_dir", inf.export_dir, "Folder written by qat export")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("input", inf.input, "An image file, or a folder searched recursively")
      ->required()
      ->check(CLI::ExistingPath);
  add_checked(cmd.sub, "--top", inf.top, "Classes to print per image", kPositive);
  add_checked(cmd.sub, "--threads", inf.threads, "Threads (0: all cores)", count_up_to(kMaxThreads));
  cmd->add_option("--save", inf.save,
                  "Also write PREFIX.inputs.f32, PREFIX.logits.f32, PREFIX.paths.txt (checks of other runtimes)");
  add_checked(cmd.sub, "--device", inf.device,
              "Where the integer model runs: " + qat::enum_name_list<qat::Device>() +
                  " (cuda: the same logits bit for bit, on the GPU)",
              CLI::IsMember({"cpu", "cuda"}));
  return cmd.running([](auto& a) { return run_infer(a); });
}

Command compare_layers_command(CLI::App& app) {
  NewCommand<CompareLayersArgs> cmd(app, "compare-layers",
                                    "Fake-quant vs integer model, layer by layer: output differences in LSBs",
                                    "Experiment config (YAML) with a quant: section");
  CompareLayersArgs& cl = cmd.args;
  add_checkpoint(cmd.sub, cl.checkpoint, "QAT checkpoint (.safetensors)");
  add_checked(cmd.sub, "--images", cl.images, "Validation images to compare (0: all)", kNonNegative);
  add_overrides(cmd.sub, cl.overrides);
  return cmd.running([](auto& a) { return run_compare_layers(a); });
}

}  // namespace qat::apps
