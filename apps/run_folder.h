#pragma once
// A training run's folder (qat train's output.dir): made, checked fresh,
// cleaned of a killed save's temporaries, and best.safetensors restored
// after a stop between the epoch's saves (Note [epoch end order]).
#include <string>

#include "apps/run_state.h"

namespace qat::apps {

// Writes `text` to path, failing with the path on any error.
void write_text(const std::string& path, const std::string& text);
// output.dir made a folder (with its parents), or a message naming it;
// whether this call made it.
bool make_run_dir(const std::string& run_dir);
// --resume's folder is a training run's: it holds last.safetensors, and a
// best.safetensors there is of the same run (its config, data folders
// aside); else a message naming what the folder is.
void check_resumable(const std::string& run_dir);
// A new run writes into a folder that holds nothing it would overwrite:
// only its lock, temporaries of a killed save, and what a run that stopped
// before its first epoch leaves (its config.yaml, metrics logs without rows).
void check_fresh_run_dir(const std::string& run_dir);
// Temporary files of checkpoint saves a killed run left behind; the run
// lock says no save is running now.
void remove_stale_temporaries(const std::string& run_dir);
// --resume after a stop between last.safetensors and best.safetensors of
// the best epoch: best.safetensors copied from last (Note [epoch end order]).
void restore_best_checkpoint(const std::string& run_dir, const RunState& state);

}  // namespace qat::apps
