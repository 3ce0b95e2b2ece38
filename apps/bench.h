#pragma once
// `qat bench`: FP32 training-step throughput on synthetic data; with --infer,
// FP32 vs integer inference throughput.
#include <functional>
#include <string>

#include "apps/config.h"
#include "core/tensor.h"

namespace qat::apps {

struct BenchOptions {
  std::string model = "alexnet_bn";
  std::string stem = "imagenet";  // model.stem, for the models that take one (resnet18, mobilenet_v2)
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
  std::string int8_kernel;  // --infer: a GemmKernel name; empty: the best this CPU runs
  std::string device = "cpu";  // where the training steps run: cpu or cuda (refused as train.device is)
  bool weight_lookahead = true;  // Note [weight lookahead]; off: every weight quantized at its forward
  std::string optimizer = "sgd";  // the training steps' update: sgd (momentum 0.9) or adamw
};

// Images per second of `forward` on one fixed batch x (opt.batch images):
// opt.warmup untimed passes, then the median of opt.steps timed ones; prints
// a line with `label`.
double time_inference(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x, const BenchOptions& opt,
                      const char* label);

// What a bench measured (images per second; 0 where not measured).
struct BenchFigures {
  double fp32 = 0;       // training step (or, --infer, FP32 inference)
  double quantized = 0;  // QAT training step with --config (or, --infer, the integer model)
  int weight_bits = 0;   // --infer: the narrowest integer weights
  std::string gemm_kernel;  // --infer: the GEMM kernel the integer model ran on
};

// The config the quantized model is built from: --config's (or 8 bits on
// the default backend), its network the FP32 one's: --model, --classes and
// --stem. With --checkpoint, the config's network must be that one already.
ExperimentConfig bench_config(const BenchOptions& opt);

// Prints the figures; `figures`, when given, receives them.
int run_bench(const BenchOptions& opt, BenchFigures* figures = nullptr);

}  // namespace qat::apps
