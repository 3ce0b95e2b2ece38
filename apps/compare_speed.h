#pragma once
// `qat compare --speed-batch B`: inference throughput of each run that has a
// best.safetensors: the FP32 model's eval forward, or the frozen integer
// model of a quantized run, on one batch of B images at the run's image size
// (median of 5 timed passes after 2 warm-up ones, the config's threads), as
// `qat bench --infer` times them. Fills RunSummary::infer_img_s.
#include <string>
#include <vector>

#include "apps/compare.h"

namespace qat::apps {

void measure_speed(std::vector<RunSummary>& runs, const std::vector<std::string>& run_dirs, int batch);

}  // namespace qat::apps
