#pragma once
// `qat bench`: FP32 training-step throughput on synthetic data; with --infer,
// FP32 vs integer inference throughput.
#include <string>

namespace qat::apps {

struct BenchOptions {
  std::string model = "alexnet_bn";
  int res = 128;
  int batch = 32;
  int classes = 10;
  int threads = 0;  // 0: all cores
  int steps = 10;
  int warmup = 3;
  bool profile = true;
  bool verbose = false;
  std::string config;  // with a quant: section: also time the QAT step of the prepared model
  bool infer = false;  // time inference instead: FP32 eval forward vs the frozen integer model
  std::string checkpoint;  // --infer with --config: freeze this checkpoint (else a calibrated random init)
};

int run_bench(const BenchOptions& opt);

}  // namespace qat::apps
