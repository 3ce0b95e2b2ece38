#pragma once
// The QAT observers of PyTorch, on a per-channel [min, max] state:
//   MinMaxObserver:               min = min(min, min(x)), max likewise (PyTorch's
//                                 MinMaxObserver / PerChannelMinMaxObserver).
//   MovingAverageMinMaxObserver:  the first observation sets min/max; later ones
//                                 m <- m + c (m_batch - m), float32, c = 0.01 by
//                                 default (PyTorch's MovingAverage[PerChannel]MinMaxObserver).
// State: min_val, max_val, f32, shape (1) per-tensor or (C) per-channel (C fixed
// at construction so a checkpoint reloads with the right shapes); +inf / -inf
// until something is observed. Per-channel reduces over every dim except
// spec.axis (Note [channel layout]). One pass over x, vectorised, OpenMP over
// chunks; no temporaries the size of x. NaNs in x are ignored by the reduction
// (PyTorch propagates them); an observation with no finite-or-inf value
// leaves a channel as it was.
#include <memory>
#include <string>

#include "quant/observe/observer.h"

namespace qat::quant {

// An observer whose state is the per-channel [min, max] that each
// observation's own per-channel min/max updates (fold_channel).
class MinMaxStateObserver : public Observer, public ChannelMinMaxFold {
 public:
  MinMaxStateObserver(const QuantSpec& spec, int64_t channels);
  Range range() const override { return {min_val_, max_val_}; }
  void reset() override;  // back to +inf / -inf, in place
  // {"min_val", ...}, {"max_val", ...}: the live state tensors.
  NamedTensors state() const override { return {{"min_val", min_val_}, {"max_val", max_val_}}; }
  ChannelMinMaxFold* channel_fold() override { return this; }
  void fold_channel(int64_t c, float cur_min, float cur_max) final;
  void preview_channel(int64_t c, float cur_min, float cur_max, float& lo, float& hi) const final;
  std::pair<uint64_t, uint64_t> state_version() const final { return {min_val_.version(), max_val_.version()}; }
  void channel_range(int64_t c, float& lo, float& hi) const override;
  void end_fold() override;
  const Tensor& min_val() const { return min_val_; }
  const Tensor& max_val() const { return max_val_; }

 protected:
  // final: the fused weight path folds channel by channel and never calls
  // update(); a subclass customises fold() only.
  void update(const Tensor& x) final;
  // One channel's [mn, mx] after an observation whose own range is [cur_min, cur_max].
  virtual void fold(float& mn, float& mx, float cur_min, float cur_max) const = 0;
  Tensor min_val_, max_val_;
};

class MinMaxObserver final : public MinMaxStateObserver {
 public:
  explicit MinMaxObserver(const QuantSpec& spec, int64_t channels = 1) : MinMaxStateObserver(spec, channels) {}
  std::string describe() const override;

 protected:
  void fold(float& mn, float& mx, float cur_min, float cur_max) const override;
};

class MovingAverageMinMaxObserver final : public MinMaxStateObserver {
 public:
  explicit MovingAverageMinMaxObserver(const QuantSpec& spec, int64_t channels = 1, float averaging_constant = 0.01f);
  std::string describe() const override;
  float averaging_constant() const { return c_; }

 protected:
  void fold(float& mn, float& mx, float cur_min, float cur_max) const override;

 private:
  float c_;
};

// The observer of a range-observing method (minmax, moving_average); throws
// for a learned method (lsq, lsq_plus), which has no observer.
std::unique_ptr<Observer> make_observer(QuantMethod method, const QuantSpec& spec, int64_t channels = 1,
                                        float averaging_constant = 0.01f);

// Per-channel min/max of x over every dim except `axis` (per_channel false:
// over everything, C = 1), written to cur_min/cur_max (C floats each, +inf /
// -inf where a channel held only NaNs). Exposed for calibration code and tests.
void reduce_minmax(const Tensor& x, bool per_channel, int64_t axis, float* cur_min, float* cur_max);

}  // namespace qat::quant
