// `qat compare`: its options (Note [command table]).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "apps/cli_checks.h"
#include "apps/cli_command.h"
#include "apps/compare.h"
#include "core/error.h"

namespace qat::apps {

Command compare_command(CLI::App& app) {
  NewCommand<CompareArgs> cmd(app, "compare", "Compare runs: Markdown table and val top-1 chart");
  CompareArgs& compare = cmd.args;
  cmd->add_option("runs", compare.runs, "Run directories")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--out", compare.out_dir, "Report folder")->capture_default_str();
  cmd->add_option("--sqnr-images", compare.sqnr_images,
                  "Per-layer output SQNR of each quantized run against the FP32 run on this many validation images "
                  "(needs the runs' best.safetensors)")
      ->check(kNonNegative);
  cmd->add_option("--speed-batch", compare.speed_batch,
                  "Time inference of each run with a best.safetensors (FP32 model / frozen integer model) at this "
                  "batch: accuracy-vs-throughput chart")
      ->check(count_up_to(4096));
  return cmd.running([](auto& a) { return run_compare(a); });
}

}  // namespace qat::apps
