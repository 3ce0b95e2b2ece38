#pragma once
// `qat bench`: FP32 training-step throughput on synthetic data.
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
  std::string config;  // with a quant: section: also time the QAT step of the prepared model  // print every step's loss
};

int run_bench(const BenchOptions& opt);

}  // namespace qat::apps
