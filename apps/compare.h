#pragma once
// `qat compare RUN_DIR...`: a Markdown table of runs (bits, method, best and
// final val accuracy, delta vs the FP32 run, weight storage, train time) and
// an SVG chart of val top-1 per epoch, written to a report folder and printed.
#include <map>
#include <string>
#include <vector>

#include "apps/config.h"

namespace qat::apps {

struct CompareArgs {
  std::vector<std::string> runs;
  std::string out_dir = "reports/compare";
  int64_t sqnr_images = 0;  // > 0: the per-layer SQNR panel on this many validation images
  int64_t speed_batch = 0;  // > 0: time inference (FP32 model / frozen integer model) at this batch
};

struct RunSummary {
  std::string name;            // run folder name; run_compare: as many trailing path components as tell runs apart
  std::string model;
  int64_t num_classes = 0;
  int weight_bits = 32, activation_bits = 32;
  std::map<std::string, int> layer_weight_bits;  // per-layer overrides (quant.overrides)
  std::map<std::string, int> layer_activation_bits;  // the activation the layer reads
  std::string method = "fp32";
  double best_top1 = 0, best_top5 = 0, final_top1 = 0, final_top5 = 0;
  double train_seconds = 0;
  int64_t weight_bytes = 0;    // weights at weight_bits, everything else float32
  std::vector<double> val_top1;  // per epoch
  std::string init_from;         // quant.init_from as recorded ("" when none)
  // Set by align_runs(): a fine-tune of another compared run continues its
  // curve: epoch e of this run is drawn at x = epoch_offset + e.
  int64_t epoch_offset = 0;
  int parent = -1;  // index of the run it continues, -1: none
  double infer_img_s = 0;  // inference throughput (qat compare --speed-batch); 0: not measured
};

// The run `init_from` names among `runs`: its checkpoint's folder is the run
// folder (compared by path, else by folder name: results/ keeps the run
// folders' names). Sets epoch_offset (the parent's offset + its epochs) and
// parent; a chain of fine-tunes adds up.
void align_runs(std::vector<RunSummary>& runs, const std::vector<std::string>& run_dirs);

// "57.1 MB", "4.1 kB", "996 B" (decimal units).
std::string bytes_str(int64_t bytes);

// Weights (parameters of >= 2 dims) at their layer's bits (`weight_bits`
// unless the layer is in `layer_weight_bits`), every other parameter float32.
// Refuses a run given twice (the same folder) and runs of different
// model.num_classes, naming the folders; run_compare and qat sweep's baselines.
void check_comparable(const std::vector<RunSummary>& runs, const std::vector<std::string>& dirs);

int64_t weight_storage_bytes(const ModelConfig& model, int weight_bits,
                             const std::map<std::string, int>& layer_weight_bits);

RunSummary summarize_run(const std::string& run_dir);
std::string markdown_table(const std::vector<RunSummary>& runs);
std::string svg_chart(const std::vector<RunSummary>& runs);
int run_compare(const CompareArgs& args);

}  // namespace qat::apps
