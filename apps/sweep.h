#pragma once
// `qat sweep CONFIG.yaml`: runs every combination of the config's `sweep:`
// lists, each in its own run directory under output.dir (named from the
// values), resumable: finished runs are skipped, interrupted ones resumed.
// Combinations the backend or spec rules reject are reported and skipped.
// Ends with the `qat compare` table of all finished runs.
#include <cstdint>
#include <string>
#include <vector>

namespace qat::apps {

struct SweepArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::vector<std::string> baselines;  // run dirs to include in the table (e.g. the FP32 run)
};

// More combinations than this are refused before any is built (a sweep of
// them would not finish; their configs alone would not fit in memory).
constexpr int64_t kMaxSweepCombinations = 10000;

// The combinations as lists of "key=value" overrides, in file order (the last
// key varies fastest).
std::vector<std::vector<std::string>> sweep_combinations(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& sweep);
// A directory name for a combination, e.g. "quant.bits=4,quant.formula=minmax" -> "bits4_formula-minmax".
std::string combination_name(const std::vector<std::string>& combo);

int run_sweep(const SweepArgs& args);

}  // namespace qat::apps
