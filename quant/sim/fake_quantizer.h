#pragma once
// FakeQuantizer: the module that simulates quantization of one tensor in a
// QAT model (PyTorch's FakeQuantize / LSQ quantizer). Two kinds, chosen once
// by make_fake_quantizer() from the config's method:
//   ObserverFakeQuantizer (minmax, moving_average, or any Observer from
//     QuantizerConfig::observer): the observer tracks the range; qparams
//     follow it while the observer is on (in training mode, or calibrating)
//     and stay those last stored while it is off.
//   LsqFakeQuantizer, LsqPlusFakeQuantizer (lsq, lsq_plus): the step (and
//     offset) are parameters the optimizer trains (initialised from the
//     first tensor seen; docs/math/lsq.md).
// Buffers (all in the state dict, so checkpoints carry them):
//   scale (C) f32, zero_point (C) i32  the qparams the LAST forward used: what
//                                      freeze() must use (Note [frozen qparams])
//   observer_enabled, fake_quant_enabled, initialized   u8 flags
//   the observer's state() (e.g. min_val, max_val)      observed kind
// Parameters (learned kind): step (C) [, offset (C)].
#include <memory>

#include "core/ops/batch_norm.h"
#include "layers/module.h"
#include "quant/backend.h"
#include "quant/observe/observer.h"
#include "quant/sim/fake_quant.h"
#include "quant/sim/weight_codes.h"
#include "quant/sim/weight_lookahead.h"
#include "quant/spec.h"

namespace qat::quant {

struct QuantizerConfig {
  QuantSpec spec;
  QuantMethod method = QuantMethod::moving_average;
  SteKind ste = SteKind::clipped;
  float averaging_constant = 0.01f;
  bool is_weight = false;  // LSQ grad scale: N = weights per step; activations: features per example
  // Observed methods: makes the observer; unset: the method's own (observe/minmax.h).
  ObserverFactory observer;
};

class FakeQuantizer : public Module {
 public:
  std::string type_name() const override { return "FakeQuantize"; }
  std::string describe() const override;

  void set_observer_enabled(bool on);
  void set_fake_quant_enabled(bool on);
  // Post-training calibration (quant/sim/calibration.h): observe in eval
  // mode too (BN on running statistics, dropout off). Not saved.
  void set_calibrating(bool on) { calibrating_ = on; }
  bool calibrating() const { return calibrating_; }
  // Fixes the qparams (calibration, a calibration cache): stores them as
  // those of the last forward and switches the observer off, so every later
  // forward and freeze() use exactly these. scale f32, zero_point i32, the
  // shape of qparams().
  void set_qparams(const QParams& q);
  // QAT from a calibration (start_from_calibration): observed kinds take the
  // qparams as set_qparams() does (fixed); learned kinds start their step
  // (and LSQ+ offset -z s) there and go on learning.
  virtual void start_from(const QParams& q) { set_qparams(q); }
  bool observer_enabled() const;
  bool fake_quant_enabled() const;
  const QuantizerConfig& config() const { return cfg_; }
  // The qparams of the last forward (exactly those applied).
  QParams qparams() const { return {scale_, zero_point_}; }
  // Stores the qparams the next forward will apply, where they can differ
  // from the last forward's: a learned step changed by the optimizer since.
  // False when none can be known yet (a learned quantizer not initialised).
  virtual bool sync_qparams() { return true; }
  // LSQ+'s learned offset beta (C); undefined for every other kind.
  virtual const Tensor& learned_offset() const { return undefined_; }
  // x quantized onto this quantizer's current grid, nothing observed or
  // learned (ops that keep their input's grid: SharedFakeQuantizer).
  virtual Tensor apply_frozen(const Tensor& x) const;
  // INT8 training's weights (quant/sim/weight_codes.h): what forward(w)
  // does to the observer and the qparams, with w's integers written to `out`
  // instead of a fake-quantized float tensor returned (no autograd: the
  // caller applies the STE, out.clipped). false, nothing done, where this
  // quantizer cannot: learned kinds, fake quantization off, a spec that
  // codes_supported() refuses. `what` names the layer in errors.
  virtual bool forward_codes(const Tensor&, QuantCodes&, const std::string&) { return false; }

 protected:
  // channels: size along spec.axis for per-channel specs, else 1.
  FakeQuantizer(const QuantizerConfig& cfg, int64_t channels);
  void store_qparams(const Tensor& scale, const Tensor& zero_point);
  bool initialized() const;
  void set_initialized();
  QuantizerConfig cfg_;
  Tensor scale_, zero_point_, observer_on_, fake_quant_on_, initialized_;
  bool calibrating_ = false;

 private:
  Tensor undefined_;
};

std::shared_ptr<FakeQuantizer> make_fake_quantizer(const QuantizerConfig& cfg, int64_t channels);

class ObserverFakeQuantizer final : public FakeQuantizer {
 public:
  ObserverFakeQuantizer(const QuantizerConfig& cfg, int64_t channels);
  ~ObserverFakeQuantizer() override;
  Tensor forward(const Tensor& x) override;
  bool forward_codes(const Tensor& w, QuantCodes& out, const std::string& what) override;
  std::string describe() const override;
  const Observer& observer() const { return *observer_; }
  Observer& observer() { return *observer_; }
  // Note [the output quantizer inside batch norm]: this quantizer as a
  // stage of the batch norm whose output it quantizes (x: that output's
  // input), doing to itself what forward() of the output would; null where
  // it cannot (then forward() runs on the output).
  std::unique_ptr<BnOutputStage> inside_stage(const Tensor& x);

 private:
  class InsideStage;
  // Note [weight lookahead]: after a training forward on a per-channel
  // weight parameter, its next fake quantization is computed by the
  // optimizer's update (the parameter's update hook); otherwise off.
  void look_ahead_at(const Tensor& x);
  void stop_looking_ahead();
  std::unique_ptr<Observer> observer_;
  std::shared_ptr<WeightLookahead> lookahead_;
  std::weak_ptr<TensorImpl> hooked_;  // the parameter lookahead_ is the update hook of
};

// A quantizer whose qparams are parameters: initialised from the first
// tensor it sees, then trained; each forward stores the qparams it applies.
class LearnedFakeQuantizer : public FakeQuantizer {
 public:
  Tensor forward(const Tensor& x) override;
  void start_from(const QParams& q) override;
  bool sync_qparams() override;

 protected:
  LearnedFakeQuantizer(const QuantizerConfig& cfg, int64_t channels);
  // The initial step (and offset) averaged over the processes of a data-parallel run.
  void average_over_processes();
  virtual void initialize_from(const Tensor& x) = 0;
  // The integer zero points of the stored qparams, for the effective step s.
  virtual Tensor zero_points(const Tensor& s) const;
  virtual Tensor quantize(const Tensor& x, float grad_scale) const = 0;
  Tensor step_;
};

class LsqFakeQuantizer final : public LearnedFakeQuantizer {
 public:
  LsqFakeQuantizer(const QuantizerConfig& cfg, int64_t channels) : LearnedFakeQuantizer(cfg, channels) {}

 private:
  void initialize_from(const Tensor& x) override;
  Tensor quantize(const Tensor& x, float grad_scale) const override;
};

class LsqPlusFakeQuantizer final : public LearnedFakeQuantizer {
 public:
  LsqPlusFakeQuantizer(const QuantizerConfig& cfg, int64_t channels);
  const Tensor& learned_offset() const override { return offset_; }
  void start_from(const QParams& q) override;
  // On the LSQ+ grid v = s q + beta, whose zero point -beta / s is fractional.
  Tensor apply_frozen(const Tensor& x) const override;

 private:
  void initialize_from(const Tensor& x) override;
  Tensor zero_points(const Tensor& s) const override;
  Tensor quantize(const Tensor& x, float grad_scale) const override;
  Tensor offset_;
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
