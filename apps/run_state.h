#pragma once
// What a run must remember to resume exactly: progress (epochs done, step in
// the current epoch, running sums of the epoch), the best val top-1 so far,
// the dropout generators' states and the config hash; stored as checkpoint
// metadata next to the model and optimizer tensors.
#include <cstdint>
#include <string>

#include "layers/module.h"
#include "optim/optimizer.h"

namespace qat::apps {

struct RunState {
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;   // steps done in the current epoch
  double best_top1 = -1;
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0, epoch_images = 0;
  void next_epoch() {
    ++epoch;
    step = 0;
    epoch_loss_sum = 0;
    epoch_correct = epoch_images = 0;
  }
};

// The name of the first model or optimizer tensor (f32) holding a NaN or an
// infinity; empty when every one is finite. A checkpoint is never written
// with such a tensor (train.cpp).
std::string first_non_finite(const Module& model, const Optimizer* optimizer);

// extra: more metadata (e.g. "calibrator" on a calibrated checkpoint).
void save_run_state(const std::string& path, Module& model, const Optimizer* optimizer, const RunState& state,
                    const std::string& config_hash, const Metadata& extra = {});
// expected_hash empty: accept any config (eval). Otherwise a different hash is
// an error naming the file and both hashes.
RunState load_run_state(const std::string& path, Module& model, Optimizer* optimizer,
                        const std::string& expected_hash);

// The distinct generators the model's dropout layers draw from, in module order.
std::vector<Generator*> model_generators(Module& model);

}  // namespace qat::apps
