#pragma once
// FakeQuantizer: the module that simulates quantization of one tensor in a
// QAT model (PyTorch's FakeQuantize / LSQ quantizer). Methods:
//   minmax, moving_average: an observer tracks the range; qparams follow it
//     while the observer is on and freeze when it is switched off.
//   lsq, lsq_plus: the step (and offset) are parameters the optimizer trains
//     (initialised from the first tensor seen; REFERENCES §2-3).
// Buffers (all in the state dict, so checkpoints carry them):
//   scale (C) f32, zero_point (C) i32  the qparams the LAST forward used: what
//                                      freeze() must use (Note [frozen qparams])
//   min_val, max_val                   observer state (observer methods)
//   observer_enabled, fake_quant_enabled, initialized   u8 flags
// Parameters (lsq methods): step (C) [, offset (C)].
#include <memory>

#include "layers/module.h"
#include "quant/sim/fake_quant.h"
#include "quant/observe/observer.h"
#include "quant/spec.h"

namespace qat::quant {

struct QuantizerConfig {
  QuantSpec spec;
  QuantMethod method = QuantMethod::moving_average;
  SteKind ste = SteKind::clipped;
  float averaging_constant = 0.01f;
  bool is_weight = false;  // LSQ grad scale: N = weights per step; activations: features per example
};

class FakeQuantizer : public Module {
 public:
  // channels: size along spec.axis for per-channel specs, else 1.
  FakeQuantizer(const QuantizerConfig& cfg, int64_t channels);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FakeQuantize"; }
  std::string describe() const override;

  void set_observer_enabled(bool on);
  void set_fake_quant_enabled(bool on);
  bool observer_enabled() const;
  bool fake_quant_enabled() const;
  const QuantizerConfig& config() const { return cfg_; }
  // The qparams of the last forward (exactly those applied).
  QParams qparams() const { return {scale_, zero_point_}; }
  bool is_learned() const { return cfg_.method == QuantMethod::lsq || cfg_.method == QuantMethod::lsq_plus; }
  // LSQ+'s learned offset beta (C), undefined for other methods.
  const Tensor& learned_offset() const { return offset_; }

 private:
  Tensor forward_observed(const Tensor& x);
  Tensor forward_learned(const Tensor& x);
  void store_qparams(const Tensor& scale, const Tensor& zero_point);
  QuantizerConfig cfg_;
  std::unique_ptr<Observer> observer_;
  Tensor scale_, zero_point_, observer_on_, fake_quant_on_, initialized_;
  Tensor step_, offset_;
};

// Applies the qparams of another quantizer without observing (ops that keep
// their input's quantization, e.g. adaptive average pooling: the integer
// kernel rounds the average back onto the input's grid).
class SharedFakeQuantizer : public Module {
 public:
  explicit SharedFakeQuantizer(std::shared_ptr<FakeQuantizer> source) : source_(std::move(source)) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SharedFakeQuantize"; }
  const std::shared_ptr<FakeQuantizer>& source() const { return source_; }

 private:
  std::shared_ptr<FakeQuantizer> source_;
};

}  // namespace qat::quant
