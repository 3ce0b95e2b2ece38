#pragma once
// Reads a backend description (configs/backends/*.yaml) into quant::Backend.
#include <string>

#include "apps/config.h"
#include "quant/backend.h"
#include "quant/sim/prepare.h"

namespace qat::apps {

// `name_or_path`: a path to a YAML file (contains '/' or ends in .yaml), or a
// name looked up as backends/<name>.yaml next to `config_dir`, one folder up,
// then in the source tree's configs/backends/. Errors name the file, key and line.
quant::Backend load_backend(const std::string& name_or_path, const std::string& config_dir);

// The config's backend (quant.backend, looked up beside the config file).
quant::Backend configured_backend(const ExperimentConfig& cfg);
// quant::prepare, its refusals (an override naming no layer) naming the
// config file they come from.
quant::PrepareReport prepare_as_configured(Module& model, const quant::Backend& backend, const quant::QConfig& qconfig,
                                           const ExperimentConfig& cfg);

}  // namespace qat::apps
