#include "apps/sweep.h"

#include <cstdio>
#include <filesystem>

#include "apps/compare.h"
#include "apps/config.h"
#include "apps/metrics_log.h"
#include "apps/train.h"
#include "core/error.h"

namespace qat::apps {

namespace fs = std::filesystem;

std::vector<std::vector<std::string>> sweep_combinations(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& sweep) {
  std::vector<std::vector<std::string>> out{{}};
  for (const auto& [key, values] : sweep) {
    std::vector<std::vector<std::string>> next;
    for (const auto& prefix : out)
      for (const auto& v : values) {
        auto c = prefix;
        c.push_back(key + "=" + v);
        next.push_back(std::move(c));
      }
    out = std::move(next);
  }
  return out;
}

std::string combination_name(const std::vector<std::string>& combo) {
  std::string name;
  for (const auto& kv : combo) {
    const auto eq = kv.find('=');
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key.rfind("quant.", 0) == 0) key = key.substr(6);
    std::string part = key + "-" + value;
    for (char& ch : part)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
    name += (name.empty() ? "" : "_") + part;
  }
  return name.empty() ? "base" : name;
}

namespace {

// What a run computes: its config without where the data lives and how it
// is read (a sweep re-run from a moved checkout, or with more loader
// workers, is the same experiment).
std::string experiment_hash(ExperimentConfig c) {
  c.data.train.clear();
  c.data.val.clear();
  c.data.workers = c.data.prefetch = 0;
  c.data.cache = false;
  return config_hash(c);
}

// A run trained with other settings (the sweep file or --set changed since)
// is not taken as this combination's result, nor resumed.
void check_same_experiment(const std::string& dir, const ExperimentConfig& want) {
  const std::string recorded = dir + "/config.yaml";
  QAT_CHECK(fs::exists(recorded), "sweep: ", dir, " holds a run without its config.yaml; remove it or choose another "
            "output.dir");
  const ExperimentConfig had = load_config(recorded, {}, DataPaths::as_recorded);
  QAT_CHECK(experiment_hash(had) == experiment_hash(want), "sweep: ", dir, " holds a run of another experiment (its ",
            recorded, " differs from this combination's config beyond data paths and loader settings: the sweep's "
            "config or --set changed since); remove it or choose another output.dir");
}

}  // namespace

int run_sweep(const SweepArgs& args) {
  const ExperimentConfig base = load_config(args.config, args.overrides);
  QAT_CHECK(!base.sweep.empty(), "sweep: ", args.config, " has no sweep: section (lists of values for keys)");
  const auto combos = sweep_combinations(base.sweep);
  std::printf("sweep: %zu combinations into %s\n", combos.size(), base.output.dir.c_str());
  std::vector<std::string> finished = args.baselines, rejected;
  // Every combination's config is loaded (and so checked) before any trains:
  // a bad value fails the sweep at once, naming the key.
  std::vector<ExperimentConfig> configs;
  std::vector<std::vector<std::string>> overrides;
  for (const auto& combo : combos) {
    std::vector<std::string> ov = args.overrides;
    ov.insert(ov.end(), combo.begin(), combo.end());
    ov.push_back("output.dir=" + base.output.dir + "/" + combination_name(combo));
    configs.push_back(load_config(args.config, ov));
    overrides.push_back(std::move(ov));
  }
  for (size_t i = 0; i < combos.size(); ++i) {
    const std::string dir = configs[i].output.dir;
    const std::vector<std::string>& ov = overrides[i];
    const bool started = fs::exists(dir + "/last.safetensors");
    if (started) check_same_experiment(dir, configs[i]);
    const auto rows = started ? read_metrics(dir) : std::vector<EpochMetrics>{};
    if (!rows.empty() && rows.back().epoch >= configs[i].train.epochs) {
      std::printf("[%zu/%zu] %s: finished, skipped\n", i + 1, combos.size(), dir.c_str());
      finished.push_back(dir);
      continue;
    }
    std::printf("[%zu/%zu] %s\n", i + 1, combos.size(), dir.c_str());
    // A combination the rules reject (e.g. power-of-two scales with affine
    // weights) is found by preparing its model first and is reported, not
    // fatal. Errors once training has started (data, NaN, I/O) stop the sweep.
    try {
      build_model(configs[i], /*load_init=*/false, /*print=*/false);
    } catch (const Error& e) {
      std::printf("  rejected: %s\n", e.what());
      rejected.push_back(combination_name(combos[i]) + ": " + e.what());
      continue;
    }
    const int rc = run_train({args.config, ov, started ? dir : "", 0});
    if (rc != 0) return rc;  // interrupted: the sweep resumes from here next time
    finished.push_back(dir);
  }
  if (!finished.empty()) run_compare({finished, base.output.dir + "/report"});
  for (const auto& r : rejected) std::printf("rejected combination %s\n", r.c_str());
  return 0;
}

}  // namespace qat::apps
