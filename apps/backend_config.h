#pragma once
// Reads a backend description (configs/backends/*.yaml) into quant::Backend.
#include <string>

#include "quant/backend.h"

namespace qat::apps {

// `name_or_path`: a path to a YAML file (contains '/' or ends in .yaml), or a
// name looked up as backends/<name>.yaml next to `config_dir`, one folder up,
// then in the source tree's configs/backends/. Errors name the file, key and line.
quant::Backend load_backend(const std::string& name_or_path, const std::string& config_dir);

}  // namespace qat::apps
