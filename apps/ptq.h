#pragma once
// The pieces `qat calibrate` and `qat sensitivity` share: which images
// calibrate (or score) a model, loading them once, a post-training-quantized
// model from in-memory FP32 weights, and the integer model's accuracy on a
// preloaded set.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/config.h"
#include "core/tensor.h"
#include "data/image_folder.h"
#include "data/transforms.h"
#include "layers/module.h"
#include "quant/observe/calibrators.h"
#include "quant/sim/prepare.h"

namespace qat::apps {

// `n` sample indices spread evenly over the classes: each class's images in
// a seeded shuffle, taken round robin; returned ascending. All of them when
// the folder holds fewer.
std::vector<int64_t> balanced_indices(const data::ImageFolder& f, int64_t n, uint64_t seed);

struct ImageSet {
  Tensor images;  // (N, 3, S, S) f32, normalised
  Tensor labels;  // (N) i32
};
// The images, decoded and transformed as for validation (images the folder's
// bad-image policy skips are left out; an unreadable one is an error naming it).
ImageSet load_image_set(const data::ImageFolder& f, const std::vector<int64_t>& idx, const data::TransformSpec& spec);

// Forward passes over x in batches (eval mode, no grad) with a progress bar;
// returns seconds. after_first: called after the first batch.
double forward_all(Module& m, const Tensor& x, int64_t batch, const std::string& label,
                   const std::function<void()>& after_first = {});

// The calibration passes over x of a model prepared for calibration
// (quant/sim/calibration.h): begin_calibration(), a pass that ranges (the
// weights' observers stop after its first batch), begin_histograms(), a
// pass that fills the histograms. Returns the seconds of both passes.
double calibration_passes(Module& m, const Tensor& x, int64_t batch);

// The config's model prepared for calibration (quant/sim/calibration.h),
// the FP32 weights copied in from `fp32` (a float model's state).
struct PtqModel {
  ModulePtr model;
  quant::PrepareReport report;
};
PtqModel prepare_for_calibration(const ExperimentConfig& cfg, const TensorMap& fp32);
// ... calibrated on `calib` with calibrator `c`.
PtqModel calibrated_model(const ExperimentConfig& cfg, const TensorMap& fp32, const Tensor& calib,
                          quant::Calibrator c, const quant::CalibratorOptions& o = {});

// Top-1 and mean cross-entropy of the frozen integer model of a calibrated
// model (or of any logits function) on a preloaded set.
struct Score {
  double top1 = 0, loss = 0;
};
Score score(const std::function<Tensor(const Tensor&)>& forward, const ImageSet& set, int64_t batch);
Score integer_score(Module& calibrated, const ImageSet& set, int64_t batch);

}  // namespace qat::apps
