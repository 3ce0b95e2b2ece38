#pragma once
// Runs a QAT (fake-quant) model and its frozen integer model side by side on
// the same input and measures, per integer layer, how far the integer outputs
// are from the fake-quant ones in output LSBs (units of the layer's grid).
// The fake-quant model is run leaf by leaf (freeze.h: execution_order) so
// every intermediate tensor is seen.
#include <string>
#include <vector>

#include "layers/module.h"
#include "quant/integer/integer_model.h"

namespace qat::quant {

struct LayerDiff {
  std::string name, op;
  bool logits = false;       // the dequantized float output (diffs in float, not LSBs)
  int64_t count = 0;         // outputs compared
  int64_t differ = 0;        // outputs that are not equal
  double max_diff = 0;       // LSBs (logits: absolute float difference)
  double sum_diff = 0;       // for the mean
  int64_t rows = 0, top1_agree = 0;  // logits only: images and argmax agreements
  int64_t correct_reference = 0, correct_integer = 0;  // logits with labels: top-1 hits of each model
  // The layer alone: fed the fake-quant model's values of its inputs (on
  // their grids), so that only its own arithmetic differs; not what it
  // inherits from the layers before (Note [a layer's own differences]).
  int64_t own_differ = 0;
  double own_max_diff = 0;
  int64_t own_top1_agree = 0;  // logits only
  void merge(const LayerDiff& o);
  double mean_diff() const { return count ? sum_diff / static_cast<double>(count) : 0.0; }
};

// x: a batch of normalised images; the model must be in eval mode (freeze did that).
// labels (optional, i32 (N)): also count each model's top-1 hits.
std::vector<LayerDiff> compare_layers(Module& qat_model, const IntegerModel& int_model, const Tensor& x,
                                      const Tensor& labels = Tensor());

}  // namespace qat::quant
