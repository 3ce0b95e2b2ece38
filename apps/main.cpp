// qat: the command-line entry point. Subcommands live in their own files;
// this is the only place errors become exit codes.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "apps/bench.h"
#include "apps/calibrate_cmd.h"
#include "apps/cli_checks.h"
#include "apps/compare.h"
#include "apps/data_cmd.h"
#include "apps/data_parallel.h"
#include "apps/sensitivity_cmd.h"
#include "apps/integer_cmd.h"
#include "apps/mpi_run.h"
#include "apps/sweep.h"
#include "apps/train.h"
#include "core/collective.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "models/models.h"

namespace {
int run(int argc, char** argv);
}  // namespace

// Under an MPI launcher: every rank runs the command; an error on any rank
// stops the whole job with a message naming the rank.
int main(int argc, char** argv) {
  try {
    qat::apps::mpi_start(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qat: error: %s\n", e.what());
    return 1;
  }
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const qat::AgreedError& e) {  // every rank stops on it together: no abort, nobody killed mid-write
    std::fprintf(stderr, "qat: error on rank %d of %d: %s\n", qat::apps::world_rank(), qat::apps::world_size(),
                 e.what());
    qat::apps::mpi_finish();
    return 1;
  } catch (const std::exception& e) {
    qat::apps::mpi_abort_with(e.what(), 1);
  }
  if (code != 0 && qat::apps::world_size() > 1 && code != 130)
    qat::apps::mpi_abort_with("the command failed (exit status " + std::to_string(code) + ")", code);
  qat::apps::mpi_finish();
  return code;
}

namespace {

int run(int argc, char** argv) {
  CLI::App app{"qat: quantization-aware training for CNNs (C++20, CPU)"};
  app.require_subcommand(1);

  qat::apps::BenchOptions bench;
  auto* b = app.add_subcommand("bench", "Measure training-step (or, with --infer, inference) throughput on synthetic data");
  std::string models;
  for (auto& n : qat::model_names()) models += (models.empty() ? "" : ", ") + n;
  b->add_option("--model", bench.model, "Model name (" + models + ")")->capture_default_str();
  b->add_option("--res", bench.res, "Input resolution (square)")->capture_default_str()->check(CLI::Range(32, 4096));
  b->add_option("--batch", bench.batch, "Batch size")->capture_default_str()->check(CLI::Range(1, 4096));
  b->add_option("--classes", bench.classes, "Number of classes")->capture_default_str()->check(qat::apps::kPositive);
  b->add_option("--threads", bench.threads, "Threads for OpenMP and OpenBLAS (0: all cores)")
      ->capture_default_str()
      ->check(qat::apps::count_up_to(qat::apps::kMaxThreads));
  b->add_option("--steps", bench.steps, "Timed steps")->capture_default_str()->check(qat::apps::kPositive);
  b->add_option("--warmup", bench.warmup, "Untimed warm-up steps")->capture_default_str()->check(qat::apps::kNonNegative);
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

  qat::apps::TrainArgs train;
  auto* t = app.add_subcommand("train", "Train a model from a YAML experiment config");
  t->add_option("config", train.config, "Experiment config (YAML)")->required()->check(CLI::ExistingFile);
  t->add_option("--set", train.overrides, "Override a config key, e.g. --set train.lr=0.01 (repeatable)");
  t->add_option("--resume", train.resume_dir, "Continue the run in RUN_DIR from its last.safetensors")
      ->check(CLI::ExistingDirectory);
  t->add_option("--stop-after-steps", train.stop_after_steps,
                "Stop as if interrupted after this many steps, saving last.safetensors (tests, partial runs)")
      ->check(qat::apps::kPositive);
  t->add_option("--device", train.device,
                "Where to train: " + qat::enum_name_list<qat::Device>() + " (overrides train.device; cuda is refused, "
                "naming why, until the whole training step runs on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));

  qat::apps::EvalArgs eval;
  auto* ev = app.add_subcommand("eval", "Evaluate a checkpoint on the config's validation set");
  ev->add_option("config", eval.config, "Experiment config (YAML)")->required()->check(CLI::ExistingFile);
  ev->add_option("--checkpoint", eval.checkpoint, "Checkpoint file (.safetensors), or a `qat export` folder")
      ->required()
      ->check(CLI::ExistingPath);
  ev->add_option("--set", eval.overrides, "Override a config key (repeatable)");

  qat::apps::CompareArgs compare;
  auto* cmp = app.add_subcommand("compare", "Compare runs: Markdown table and val top-1 chart");
  cmp->add_option("runs", compare.runs, "Run directories")->required()->check(CLI::ExistingDirectory);
  cmp->add_option("--out", compare.out_dir, "Report folder")->capture_default_str();
  cmp->add_option("--sqnr-images", compare.sqnr_images,
                  "Per-layer output SQNR of each quantized run against the FP32 run on this many validation images "
                  "(needs the runs' best.safetensors)")
      ->check(qat::apps::kNonNegative);
  cmp->add_option("--speed-batch", compare.speed_batch,
                  "Time inference of each run with a best.safetensors (FP32 model / frozen integer model) at this "
                  "batch: accuracy-vs-throughput chart")
      ->check(qat::apps::count_up_to(4096));

  qat::apps::SweepArgs sweep;
  auto* sw = app.add_subcommand("sweep", "Train every combination of a config's sweep: lists (resumable)");
  sw->add_option("config", sweep.config, "Experiment config with a sweep: section")->required()->check(CLI::ExistingFile);
  sw->add_option("--set", sweep.overrides, "Override a config key for every run (repeatable)");
  sw->add_option("--baseline", sweep.baselines, "Run directories to add to the final table (e.g. the FP32 run)")
      ->check(CLI::ExistingDirectory);

  qat::apps::ExportArgs exp;
  auto* ex = app.add_subcommand("export", "Freeze a QAT checkpoint into an integer model and write it to a folder");
  ex->add_option("config", exp.config, "Experiment config (YAML) with a quant: section")->required()->check(CLI::ExistingFile);
  ex->add_option("--checkpoint", exp.checkpoint, "QAT checkpoint (.safetensors)")->required()->check(CLI::ExistingPath);
  ex->add_option("--out", exp.out_dir, "Output folder (manifest.yaml + weights.safetensors), or the .onnx file")
      ->required();
  ex->add_option("--format", exp.format, "qat (qat's own folder) or onnx (QDQ, opset 13)")->capture_default_str();
  ex->add_option("--onnx-profile", exp.onnx_profile,
                 "standard, or tensorrt (int8 activations, zero points 0: TensorRT's explicit quantization)")
      ->capture_default_str();
  ex->add_flag("--onnx-int32-bias", exp.onnx_int32_bias,
               "int32 biases + DequantizeLinear (ONNX Runtime's integer kernels; drops qat's bias fraction)");
  ex->add_option("--set", exp.overrides, "Override a config key (repeatable)");

  qat::apps::InferArgs inf;
  auto* in = app.add_subcommand("infer", "Classify images with an exported integer model (top classes)");
  in->add_option("export_dir", inf.export_dir, "Folder written by qat export")->required()->check(CLI::ExistingDirectory);
  in->add_option("input", inf.input, "An image file, or a folder searched recursively")->required()->check(CLI::ExistingPath);
  in->add_option("--top", inf.top, "Classes to print per image")->capture_default_str()->check(qat::apps::kPositive);
  in->add_option("--threads", inf.threads, "Threads (0: all cores)")
      ->capture_default_str()
      ->check(qat::apps::count_up_to(qat::apps::kMaxThreads));
  in->add_option("--save", inf.save,
                 "Also write PREFIX.inputs.f32, PREFIX.logits.f32, PREFIX.paths.txt (checks of other runtimes)");
  in->add_option("--device", inf.device,
                 "Where the integer model runs: " + qat::enum_name_list<qat::Device>() +
                     " (cuda: the same logits bit for bit, on the GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));

  qat::apps::CompareLayersArgs cl;
  auto* cls = app.add_subcommand("compare-layers",
                                 "Fake-quant vs integer model, layer by layer: output differences in LSBs");
  cls->add_option("config", cl.config, "Experiment config (YAML) with a quant: section")->required()->check(CLI::ExistingFile);
  cls->add_option("--checkpoint", cl.checkpoint, "QAT checkpoint (.safetensors)")->required()->check(CLI::ExistingPath);
  cls->add_option("--images", cl.images, "Validation images to compare (0: all)")->capture_default_str()->check(qat::apps::kNonNegative);
  cls->add_option("--set", cl.overrides, "Override a config key (repeatable)");

  qat::apps::CalibrateArgs cal;
  std::string calibrator;
  auto* ca = app.add_subcommand("calibrate",
                                "Post-training quantization: calibrate activation ranges of an FP32 checkpoint on "
                                "training images (TensorRT's calibrators and cache)");
  ca->add_option("config", cal.config, "Experiment config (YAML) with a quant: section")->required()->check(CLI::ExistingFile);
  ca->add_option("--checkpoint", cal.checkpoint, "FP32 checkpoint (.safetensors)")->required()->check(CLI::ExistingPath);
  ca->add_option("--calibrator", calibrator,
                 "Threshold choice: " + qat::enum_name_list<qat::quant::Calibrator>() + " (default entropy)");
  ca->add_option("--percentile", cal.percentile, "Percentile of the percentile calibrator")
      ->capture_default_str()
      ->check(qat::apps::finite_in(1e-9, 100.0));
  ca->add_option("--images", cal.images, "Calibration images from the training set (balanced across classes)")
      ->capture_default_str()
      ->check(qat::apps::kPositive);
  ca->add_option("--cache", cal.cache,
                 "Calibration cache: read when it exists (calibration skipped), else written (default OUT/calibration.cache)");
  ca->add_option("--out", cal.out_dir, "Output folder (default <output.dir>-ptq)");
  ca->add_flag("--compare", cal.compare, "Every calibrator on the same images: val accuracy table and chart");
  ca->add_option("--set", cal.overrides, "Override a config key (repeatable)");

  qat::apps::SensitivityArgs sens;
  std::string sens_calibrator;
  auto* se = app.add_subcommand("sensitivity",
                                "Which layers can go to low bits: each layer alone at --bits (post-training), a "
                                "ranking, and a mixed-precision config within a budget");
  se->add_option("config", sens.config, "Experiment config (YAML) with a quant: section")->required()->check(CLI::ExistingFile);
  se->add_option("--checkpoint", sens.checkpoint, "FP32 checkpoint (.safetensors)")->required()->check(CLI::ExistingPath);
  se->add_option("--bits", sens.bits, "Low bit width tried per layer")->capture_default_str()->check(CLI::Range(2, 7));
  se->add_option("--high-bits", sens.high_bits, "Bit width of every other layer")->capture_default_str()->check(CLI::Range(3, 8));
  se->add_option("--images", sens.images, "Validation images scored (balanced across classes)")
      ->capture_default_str()
      ->check(qat::apps::kPositive);
  se->add_option("--calib-images", sens.calib_images, "Training images calibrating each variant")
      ->capture_default_str()
      ->check(qat::apps::kPositive);
  se->add_option("--calibrator", sens_calibrator,
                 "Activation thresholds: " + qat::enum_name_list<qat::quant::Calibrator>() + " (default mse)");
  se->add_option("--max-drop", sens.max_drop, "Budget: top-1 points below the high-bit model")
      ->capture_default_str()
      ->check(qat::apps::kNonNegative);
  se->add_option("--finetune-steps", sens.finetune_steps,
                 "Also train each variant this many QAT steps from its calibration before scoring (slower)")
      ->check(qat::apps::kNonNegative);
  se->add_option("--size-mb", sens.size_mb, "Budget instead: MB of weights (1 MB = 10^6 bytes)")->check(qat::apps::kPositive);
  se->add_option("--out", sens.out_dir, "Output folder (default <output.dir>-sensitivity)");
  se->add_option("--set", sens.overrides, "Override a config key (repeatable)");

  qat::apps::add_data_command(app);

  try {
    // Subcommands registered with their own callbacks (data) run inside parse().
    app.parse(argc, argv);
    qat::max_cpu_isa();  // a bad QAT_MAX_CPU_ISA fails here, before any work
    // Note [checks every process makes]: every process refuses together, without an abort.
    qat::apps::check_on_every_process([&] {
      QAT_CHECK(qat::apps::world_size() <= 1 || t->parsed(),
                "only `qat train` runs as several MPI processes; run this command as one process");
    });
    if (b->parsed()) return qat::apps::run_bench(bench);
    if (t->parsed()) return qat::apps::run_train(train);
    if (ev->parsed()) return qat::apps::run_eval(eval);
    if (cmp->parsed()) return qat::apps::run_compare(compare);
    if (sw->parsed()) return qat::apps::run_sweep(sweep);
    if (ex->parsed()) return qat::apps::run_export(exp);
    if (in->parsed()) return qat::apps::run_infer(inf);
    if (cls->parsed()) return qat::apps::run_compare_layers(cl);
    if (ca->parsed()) {
      if (!calibrator.empty()) {
        const auto c = qat::enum_from_name<qat::quant::Calibrator>(calibrator);
        if (!c) throw qat::Error("calibrate: --calibrator must be one of " +
                                 qat::enum_name_list<qat::quant::Calibrator>() + ", got '" + calibrator + "'");
        cal.calibrator = *c;
      }
      return qat::apps::run_calibrate(cal);
    }
    if (se->parsed()) {
      if (!sens_calibrator.empty()) {
        const auto c = qat::enum_from_name<qat::quant::Calibrator>(sens_calibrator);
        if (!c) throw qat::Error("sensitivity: --calibrator must be one of " +
                                 qat::enum_name_list<qat::quant::Calibrator>() + ", got '" + sens_calibrator + "'");
        sens.calibrator = *c;
      }
      return qat::apps::run_sensitivity(sens);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    if (qat::apps::world_size() > 1) throw;  // main() stops every rank
    std::fprintf(stderr, "qat: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace
