#pragma once
// What a run must remember to resume exactly: progress (epochs done, step in
// the current epoch, running sums of the epoch), the best val top-1 so far,
// the dropout generators' states and the config hash; stored as checkpoint
// metadata next to the model and optimizer tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "apps/config.h"
#include "apps/metrics_log.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace qat::apps {

struct RunState {
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;   // steps done in the current epoch
  double best_top1 = -1;
  // The epoch best_top1 was reached at (metadata "best_epoch"); 0: none yet,
  // or a checkpoint saved before the record.
  int64_t best_epoch = 0;
  // Epoch `epoch`'s rows of metrics.csv / metrics.jsonl (metadata
  // "metrics_csv_row", "metrics_jsonl_row"; empty: none recorded): a resume
  // appends them where the log lacks them (Note [epoch end order]).
  MetricsRows epoch_rows;
  // Read back only (load_run_state): the loaded checkpoint's "model_sha256", empty if none.
  std::string loaded_model_sha256;
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0, epoch_images = 0;
  // The training set's class folders in label order (metadata "classes");
  // empty where a checkpoint predates the record.
  std::vector<std::string> classes;
  void next_epoch() {
    ++epoch;
    step = 0;
    epoch_loss_sum = 0;
    epoch_correct = epoch_images = 0;
  }
};

// What tells two lists of class folders apart: "val lacks dog; val has
// bird, which train lacks" (or, the same names, their order).
std::string class_folders_difference(std::vector<std::string> train, std::vector<std::string> val);
// A model's outputs are its training set's classes in order: folders named
// or ordered otherwise would be scored against the wrong labels. Fails
// naming `source` (the checkpoint or export) and `folder_root`.
void check_same_classes(const std::vector<std::string>& recorded, const std::vector<std::string>& folders,
                        const std::string& op, const std::string& source, const std::string& folder_root);

// The name of the first model or optimizer tensor (f32) holding a NaN or an
// infinity; empty when every one is finite. A checkpoint is never written
// with such a tensor (train.cpp).
std::string first_non_finite(const Module& model, const Optimizer* optimizer);
// Whether buffer `name` is an observer's range that never saw data (min_val
// all +inf or max_val all -inf, as observers start), not a diverged value.
bool never_observed(const Module& model, const std::string& name);

// The spec of each fake quantizer of a model (bits, signedness, symmetry,
// granularity: what gives its stored scales and zero points their meaning),
// as metadata "quantizer.<module name>", and their count as "quantizers".
Metadata quantizer_specs(Module& model);

// What save_run_state writes beside the tensors: progress, generators, cfg's
// config hash, the model's quantizer specs and its digest, then `extra`
// (computed once where one state is saved twice: last and best), and last
// the digests of the optimizer's state ("optimizer_sha256", with an
// optimizer) and of all this metadata ("metadata_sha256").
Metadata run_state_metadata(Module& model, const Optimizer* optimizer, const RunState& state,
                            const ExperimentConfig& cfg, const Metadata& extra = {});
// Saves with cfg's config hash and the model's quantizer specs. extra: more metadata
// (e.g. "calibrator" on a calibrated checkpoint).
void save_run_state(const std::string& path, Module& model, const Optimizer* optimizer, const RunState& state,
                    const ExperimentConfig& cfg, const Metadata& extra = {});

// load_checkpoint, then the model's tensors checked against the digest
// save_run_state records ("model_sha256"), the optimizer's state (when one is
// loaded) against "optimizer_sha256" and the metadata against
// "metadata_sha256" (a file saved before a digest was recorded is not
// checked for it): a flipped bit in a weight, a momentum or the progress is
// an error naming the file, not a run that silently goes on from something
// else. (Digests find corruption; whoever edits a file can rewrite them.)
Metadata load_model_checked(const std::string& path, Module& model, Optimizer* optimizer);

// Note [checkpoint identity]. Every checkpoint qat writes records the model
// it holds (metadata "model": model.name, "num_classes") and its kind
// ("kind"): a float model, a QAT model, a calibration (qat calibrate) or a
// model with INT8 training's state. A loader handed another model or kind
// says which it got and which it wants, in words, before any tensor is read
// (otherwise: "missing keys ..." or "saved with other quantizers"). A
// checkpoint written before the record is known by what it has: a
// "calibrator" (calibrated), a quantizer count (0: float, else QAT).
enum class CheckpointKind { float_model, qat, calibrated, int8_training };
const char* checkpoint_kind_name(CheckpointKind k);  // metadata "kind": float, qat, calibrated, int8
// The kind a config's model is saved as (calibrated: qat calibrate's output).
CheckpointKind checkpoint_kind_of(const ExperimentConfig& cfg, bool calibrated = false);
// The kinds a config loads for eval, export and resume: its own, and for a
// QAT config (without INT8 training) a calibration too.
std::vector<CheckpointKind> kinds_loaded_by(const ExperimentConfig& cfg);
// Refuses, naming `path`, what it is and what `role` (e.g. "quant.init_from",
// "calibrate --checkpoint") takes, unless it is a safetensors checkpoint of
// cfg's model and classes and of one of the `accepted` kinds; a folder (an
// export, a run) or a file of another format is named as what it is. `hint`
// ends the message (what to give instead). Returns the metadata it read.
Metadata check_checkpoint_identity(const std::string& path, const ExperimentConfig& cfg,
                               const std::vector<CheckpointKind>& accepted, const std::string& role,
                               const std::string& hint);

// How much of the loading config must agree with the checkpoint's.
enum class ConfigMatch {
  any,            // tests and tools that only read the weights
  quant,          // eval, export, bench: the quantizer specs, checked before any tensor is loaded (a checkpoint
                  // saved before they were recorded passes)
  whole_config,   // resume: the config hash too (output.dir and train.threads may differ)
};
// A mismatch is an error naming the file, the key (or both hashes) and both
// values; so is progress metadata out of range.
RunState load_run_state(const std::string& path, Module& model, Optimizer* optimizer,
                        const ExperimentConfig* cfg = nullptr, ConfigMatch match = ConfigMatch::any);

// The distinct generators the model's dropout layers draw from, in module order.
std::vector<Generator*> model_generators(Module& model);

}  // namespace qat::apps
