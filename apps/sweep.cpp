#include "apps/sweep.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "apps/compare.h"
#include "apps/config.h"
#include "apps/metrics_log.h"
#include "apps/train.h"
#include "core/error.h"

namespace qat::apps {

namespace fs = std::filesystem;

std::vector<std::vector<std::string>> sweep_combinations(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& sweep) {
  int64_t count = 1;  // checked before any list is built: 10 keys of 10 values would not fit in memory
  for (const auto& [key, values] : sweep) {
    count *= std::max<int64_t>(1, static_cast<int64_t>(values.size()));
    QAT_CHECK(count <= kMaxSweepCombinations, "sweep: the sweep: lists make more than ", kMaxSweepCombinations,
              " combinations (at key ", key, " already ", count, "); split the sweep");
  }
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

// Ctrl-C or SIGTERM outside a run's steps (while one validated, or between runs).
int interrupted_sweep(size_t next, size_t total) {
  std::fprintf(stderr, "qat: sweep interrupted before combination %zu of %zu; run the same command again to go on\n",
               next + 1, total);
  return 130;
}

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

// Two combinations whose names map to one folder (values differing only in
// characters a folder name cannot keep: "d/x" and "d_x") would share a run.
void check_distinct_folders(const std::vector<std::vector<std::string>>& combos) {
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < combos.size(); ++i) {
    const auto [at, fresh] = seen.emplace(combination_name(combos[i]), i);
    if (fresh) continue;
    auto joined = [](const std::vector<std::string>& c) {
      std::string s;
      for (const auto& kv : c) s += (s.empty() ? "" : ", ") + kv;
      return s;
    };
    QAT_FAIL("sweep: the combinations {", joined(combos[at->second]), "} and {", joined(combos[i]),
             "} would both train in the folder ", at->first, " (a folder name keeps only letters, digits, '-' and "
             "'_'); make the values differ in those");
  }
}

}  // namespace

int run_sweep(const SweepArgs& args) {
  const ExperimentConfig base = load_config(args.config, args.overrides);
  QAT_CHECK(!base.sweep.empty(), "sweep: ", args.config, " has no sweep: section (lists of values for keys)");
  const auto combos = sweep_combinations(base.sweep);
  check_distinct_folders(combos);
  // The baselines before anything trains: a wrong folder, one given twice,
  // one of another num_classes or one of the sweep's own folders is found at
  // once, not by the report after the sweep.
  std::vector<RunSummary> baselines;
  for (const auto& b : args.baselines) baselines.push_back(summarize_run(b));
  check_comparable(baselines, args.baselines);
  for (size_t i = 0; i < baselines.size(); ++i) {
    QAT_CHECK(baselines[i].num_classes == base.model.num_classes, "sweep: --baseline ", args.baselines[i], " has ",
              baselines[i].num_classes, " classes but ", args.config, " has ", base.model.num_classes,
              "; runs of different model.num_classes are not comparable");
    for (const auto& combo : combos)
      QAT_CHECK(fs::weakly_canonical(args.baselines[i]) !=
                    fs::weakly_canonical(base.output.dir + "/" + combination_name(combo)),
                "sweep: --baseline ", args.baselines[i], " is the folder of the sweep's combination ",
                combination_name(combo), "; it is in the report already");
  }
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
  InterruptScope interrupts;  // one for the whole sweep: a Ctrl-C between runs or in a validation stops it too
  for (size_t i = 0; i < combos.size(); ++i) {
    if (InterruptScope::interrupted()) return interrupted_sweep(i, combos.size());
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
    const int rc = run_train({args.config, ov, started ? dir : "", 0, {}, /*sweep_member=*/true});
    if (rc != 0) return rc;  // interrupted: the sweep resumes from here next time
    finished.push_back(dir);
  }
  for (const auto& r : rejected) std::printf("rejected combination %s\n", r.c_str());
  // Every combination rejected is a config error (an override naming no layer, say), not a sweep's result.
  QAT_CHECK(rejected.size() < combos.size(), "sweep: every one of the ", combos.size(), " combinations of ",
            args.config, " was rejected (above); nothing was trained. The first: ", rejected.front());
  if (!finished.empty()) run_compare({finished, base.output.dir + "/report"});
  return 0;
}

}  // namespace qat::apps
