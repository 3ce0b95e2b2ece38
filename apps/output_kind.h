#pragma once
// What kind of qat output a folder holds, to keep one command from writing
// into another's output (calibrate, sensitivity, compare --out).
#include <initializer_list>
#include <string>

namespace qat::apps {

// The kinds of qat output an --out folder may already hold, each known by its
// files: a training run (checkpoints, metrics, lock), an export (manifest,
// weights) and a calibration (calibrated checkpoint, cache).
enum class OutputKind { training_run, export_model, calibration };
// Refuses `dir`, the --out of `command` (or what `option` names), when it
// holds an output of one of the `refused` kinds, naming the folder, the kind
// and the file that shows it: called before anything is written there.
void check_out_kind(const std::string& command, const std::string& dir, std::initializer_list<OutputKind> refused,
                    const std::string& option = "--out");

}  // namespace qat::apps
