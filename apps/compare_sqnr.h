#pragma once
// The per-layer panel of `qat compare --sqnr-images N`: for each quantized
// run, each quantized layer's output against the FP32 run's (the same
// module, after the layers folded into it: conv+bn+relu ends at the ReLU's
// place), as SQNR = 10 log10(sum ref^2 / sum (ref - q)^2) in dB over N
// validation images (balanced over the classes). Higher is closer; every
// 6 dB is about one more bit.
#include <map>
#include <string>
#include <vector>

#include "apps/compare.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace qat::apps {

// Outputs of every module of a model made of Sequentials run child by child
// (AlexNet, SmallCNN), by module name.
std::map<std::string, Tensor> trace_outputs(Module& model, const Tensor& x);

// 10 log10(signal / noise) of accumulated sums; +inf when the noise is 0.
double sqnr_db(double signal, double noise);

struct LayerSqnr {
  std::string layer;  // the quantized layer, e.g. "features.0"
  double db = 0;
};
struct RunSqnr {
  std::string run;
  std::vector<LayerSqnr> layers;
  int64_t images = 0;  // the validation images measured (fewer than asked where the set is smaller)
};

// For every quantized run of `runs` (run_dirs: their folders; align_runs()
// done) that has a best.safetensors and descends from the FP32 run (its
// quant.init_from chain reaches it: a run trained from scratch is another
// network), against the FP32 run's best.safetensors. Empty when there is
// no such pair.
std::vector<RunSqnr> layer_sqnr(const std::vector<RunSummary>& runs, const std::vector<std::string>& run_dirs,
                                int64_t images);
std::string sqnr_table(const std::vector<RunSqnr>& s);
std::string sqnr_chart(const std::vector<RunSqnr>& s);

}  // namespace qat::apps
