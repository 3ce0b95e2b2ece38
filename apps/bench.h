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
  bool verbose = false;  // print every step's loss
};

int run_bench(const BenchOptions& opt);

}  // namespace qat::apps
