#pragma once
// Observers: running statistics of a tensor from which qparams() derives the
// scale and zero point by the QuantSpec (REFERENCES.md §1). Small classes, not
// Modules: a QAT module owns one and registers its state() tensors as buffers,
// so checkpoints carry them (and load_state_dict writes into them in place:
// the handles never change).
//
//   MinMaxObserver:               min = min(min, min(x)), max likewise (PyTorch's
//                                 MinMaxObserver / PerChannelMinMaxObserver).
//   MovingAverageMinMaxObserver:  the first observation sets min/max; later ones
//                                 m <- m + c (m_batch - m), float32, c = 0.01 by
//                                 default (PyTorch's MovingAverage[PerChannel]MinMaxObserver).
// State: min_val, max_val, f32, shape (1) per-tensor or (C) per-channel (C fixed
// at construction so a checkpoint reloads with the right shapes); +inf / -inf
// until something is observed. Per-channel reduces over every dim except
// spec.axis. One pass over x, vectorised, OpenMP over chunks; no temporaries
// the size of x. NaNs in x are ignored by the reduction (PyTorch propagates
// them); an observation with no finite-or-inf value leaves a channel as it was.
// observe() does nothing while `enabled` is false (frozen qparams) or x is empty.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "quant/qparams.h"
#include "quant/spec.h"

namespace qat::quant {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  // same as qat::NamedTensors (layers/module.h)

enum class ObserverKind { minmax, moving_average };

class Observer {
 public:
  // channels: C for a per-channel spec (the size of x along spec.axis), 1 otherwise.
  Observer(const QuantSpec& spec, int64_t channels);
  virtual ~Observer() = default;
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // x: f32, any shape; per-channel: x.size(spec.axis) == channels(). Not differentiable.
  void observe(const Tensor& x);
  QParams qparams() const { return compute_qparams(spec_, min_val_, max_val_); }
  void reset();  // back to +inf / -inf, in place
  // Folds the min/max of channels [c0, c1) of one observation into the state
  // (for fused observe-and-quantize kernels that reduce channel by channel;
  // channels are independent). The caller bumps the state's version once
  // after the whole tensor (bump_state_version). No-op while !enabled.
  void observe_channels(int64_t c0, int64_t c1, const float* cur_min, const float* cur_max) {
    if (enabled) update(c0, c1, cur_min, cur_max);
  }
  void bump_state_version() {
    min_val_.bump_version();
    max_val_.bump_version();
  }
  // {"min_val", ...}, {"max_val", ...}: the live state tensors (register as buffers).
  NamedTensors state() const { return {{"min_val", min_val_}, {"max_val", max_val_}}; }
  const Tensor& min_val() const { return min_val_; }
  const Tensor& max_val() const { return max_val_; }
  const QuantSpec& spec() const { return spec_; }
  int64_t channels() const { return min_val_.numel(); }
  bool initialized() const;  // something has been observed since construction/reset
  virtual ObserverKind kind() const = 0;
  virtual std::string describe() const = 0;

  bool enabled = true;  // false: observe() is a no-op (frozen qparams)

 protected:
  // Folds one batch's per-channel min/max (cur_min[c] <= cur_max[c]) into the state.
  // Channels [c0, c1); cur_min/cur_max are indexed by c - c0.
  virtual void update(int64_t c0, int64_t c1, const float* cur_min, const float* cur_max) = 0;
  QuantSpec spec_;
  Tensor min_val_, max_val_;
};

class MinMaxObserver final : public Observer {
 public:
  explicit MinMaxObserver(const QuantSpec& spec, int64_t channels = 1) : Observer(spec, channels) {}
  ObserverKind kind() const override { return ObserverKind::minmax; }
  std::string describe() const override;

 protected:
  void update(int64_t c0, int64_t c1, const float* cur_min, const float* cur_max) override;
};

class MovingAverageMinMaxObserver final : public Observer {
 public:
  explicit MovingAverageMinMaxObserver(const QuantSpec& spec, int64_t channels = 1,
                                       float averaging_constant = 0.01f);
  ObserverKind kind() const override { return ObserverKind::moving_average; }
  std::string describe() const override;
  float averaging_constant() const { return c_; }

 protected:
  void update(int64_t c0, int64_t c1, const float* cur_min, const float* cur_max) override;

 private:
  float c_;
};

std::unique_ptr<Observer> make_observer(ObserverKind kind, const QuantSpec& spec, int64_t channels = 1,
                                        float averaging_constant = 0.01f);

// Per-channel min/max of x over every dim except `axis` (per_channel false:
// over everything, C = 1), written to cur_min/cur_max (C floats each, +inf /
// -inf where a channel held only NaNs). Exposed for calibration code and tests.
void reduce_minmax(const Tensor& x, bool per_channel, int64_t axis, float* cur_min, float* cur_max);

}  // namespace qat::quant
