#pragma once
// Post-training calibration of a prepared model (docs/math/calibration.md):
//   1. prepare() with calibration_qconfig(): min/max observers (max per
//      channel) on the weights, histogram observers on the activations;
//   2. begin_calibration(): fake quantization off, every observer on, also
//      in eval mode: the forward passes are the float network's (BN on
//      running statistics, dropout off) while the observers collect; the
//      histogram observers only range;
//   3. forward the calibration images (eval mode, no grad), begin_histograms(),
//      and forward them again: Note [two calibration passes];
//   4. apply_calibration(): each activation's scale from a calibrator (or
//      from a calibration cache), the weights' from their observers; then
//      fake quantization on and every observer off, so that the model's
//      forward, freeze() and a saved checkpoint all use exactly these
//      qparams. apply_calibration() may run again with another calibrator on
//      the same histograms (qat calibrate --compare).
// The checkpoint of the result has the layout of a min/max-observed QAT
// model (state: min_val, max_val, scale, zero_point, flags), so a config with
// quant.method minmax (or moving_average) loads it.
#include <map>
#include <string>
#include <vector>

#include "layers/module.h"
#include "quant/backend.h"
#include "quant/observe/calibrators.h"
#include "quant/observe/histogram.h"
#include "quant/sim/fake_quantizer.h"

namespace qat::quant {

// `base` with method minmax and histogram observers (`bins` bins) on every
// activation.
QConfig calibration_qconfig(const QConfig& base, int64_t bins = 2048);

void begin_calibration(Module& model);
// Note [two calibration passes]: after a first pass over the calibration
// images, which found each activation's range, every histogram starts at its
// max |x|, so a second pass over the same images fills 2048 bins over
// [0, absmax] (the reference's histogram; TensorRT's entropy calibration also
// reads its batches twice). A histogram grown in one pass uses between half
// and all of its bins, depending on the order of the batches: in the test, 8
// batches of 100,000 ReLU'd normals gave the entropy threshold 4.38 when the
// batch holding the max (4.64) came first and 4.64 (no clipping) otherwise.
void begin_histograms(Module& model);
// After the first calibration batch: the weights' observers stop (the weights
// do not change while calibrating; their max per channel is known), so later
// batches do not re-read every weight.
void stop_observing_weights(Module& model);

// One activation quantizer of a model being calibrated, in forward order.
struct CalibratedTensor {
  std::string name;  // module name of the quantizer, e.g. "features.0.input_quant"
  FakeQuantizer* quantizer;
  const HistogramObserver* observer;  // nullptr: not a histogram-observed quantizer
  float observed_min() const;
  float observed_max() const;
};
std::vector<CalibratedTensor> calibrated_tensors(Module& model);

// Activation scales (name -> TensorRT scale, calibrators.h cache_scale) from
// one calibrator; every calibrated tensor must have seen something.
std::map<std::string, float> choose_scales(const std::vector<CalibratedTensor>& tensors, Calibrator c,
                                           const CalibratorOptions& o);

// Writes the activations' qparams (qparams_for_cache_scale of each scale and
// the observed range) and the weights' (their observers'), turns observers
// off and fake quantization on. `scales` must name exactly the model's
// calibrated tensors (an error names the first one missing or unknown).
// observed: name -> [min, max] where the tensor was not observed in this
// process (a cache read back; also written into the observer's state, so the
// checkpoint equals the calibration's); empty: the observers' ranges.
void apply_calibration(Module& model, const std::map<std::string, float>& scales,
                       const std::map<std::string, std::pair<float, float>>& observed = {});

// QAT from a calibration (quant.init_from naming a `qat calibrate`
// checkpoint): `calibrated` is a model prepared with calibration_qconfig and
// loaded from it. Copies every tensor of the same name, shape and dtype
// (float weights, BN statistics, the activation quantizers' qparams and
// state) into the QAT model `qat_model`, except the weight quantizers' (they
// start afresh from the weights, which train); then each activation
// quantizer start_from()s its calibrated qparams: observed kinds keep them
// fixed (observer off), learned ones (lsq, lsq_plus) start their steps there.
// Returns the number of activation quantizers started.
int64_t start_from_calibration(Module& qat_model, Module& calibrated);

}  // namespace qat::quant
