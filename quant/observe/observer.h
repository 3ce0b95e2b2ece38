#pragma once
// Observer: estimates the range of the values one tensor takes, from which
// qparams() derives scale and zero point by the QuantSpec (docs/math/fake_quant.md §2-3).
// The base of every range estimator: the QAT observers (minmax.h) and the
// post-training calibrators. Not a Module: the owner (a FakeQuantizer, a
// calibration pass) registers state() as its buffers, so checkpoints carry it
// and load_state_dict writes into those tensors in place (the handles never
// change).
//
// Writing one: derive, implement update() (fold one tensor into the
// statistics), range() (the current per-channel [min, max]), reset() and
// describe(); return the statistics from state() if a checkpoint must carry
// them; override qparams() when the scale is not the range's (a calibrator
// choosing a threshold). Hand it to prepare() through QConfig::observer
// (quant/backend.h): every observed quantizer of the model then uses it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "quant/qparams.h"
#include "quant/spec.h"

namespace qat::quant {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  // same as qat::NamedTensors (layers/module.h)

// Per-channel range: f32, shape (C); +inf / -inf where nothing was seen.
struct Range {
  Tensor min_val, max_val;
};

class ChannelMinMaxFold;

class Observer {
 public:
  // channels: C for a per-channel spec (the size of x along spec.axis), 1 otherwise.
  Observer(const QuantSpec& spec, int64_t channels);
  virtual ~Observer() = default;
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // x: f32, any shape; per-channel: x.size(spec.axis) == channels(). Not
  // differentiable. Does nothing while `enabled` is false (observer off) or
  // x is empty; otherwise checks x and hands it to update().
  void observe(const Tensor& x);
  virtual Range range() const = 0;
  // From range() by compute_qparams (qparams.h).
  virtual QParams qparams() const;
  virtual void reset() = 0;
  // The tensors a checkpoint must carry, by name (registered as buffers).
  virtual NamedTensors state() const { return {}; }
  virtual std::string describe() const = 0;
  // Something was observed since construction / reset (channel 0's range is set).
  virtual bool initialized() const;
  // Observers whose state is a per-channel fold of each observation's min/max
  // return it (fused kernels then observe while they quantize); nullptr: none.
  virtual ChannelMinMaxFold* channel_fold() { return nullptr; }

  const QuantSpec& spec() const { return spec_; }
  int64_t channels() const { return channels_; }

  bool enabled = true;  // false: observe() is a no-op (observer off, qparams fixed)

 protected:
  // x: checked, non-empty.
  virtual void update(const Tensor& x) = 0;
  QuantSpec spec_;
  int64_t channels_;
};

// The fast path of observers whose state is one [min, max] per channel that
// each observation updates from its own per-channel min/max, channel by
// channel (MinMax, MovingAverage). A fused kernel (sim/fake_quant.h) reduces
// one channel of a tensor, folds it and quantizes it while it is in cache;
// the result equals observe() followed by qparams().
class ChannelMinMaxFold {
 public:
  virtual ~ChannelMinMaxFold() = default;
  // Folds one observation's [cur_min, cur_max] of channel c (+inf / -inf when
  // the channel held only NaNs). Distinct channels may be folded concurrently.
  virtual void fold_channel(int64_t c, float cur_min, float cur_max) = 0;
  // The range fold_channel(c, cur_min, cur_max) would leave channel c with,
  // the state unchanged (a weight's fake quantization computed ahead of its
  // forward: quant/sim/weight_lookahead.h).
  virtual void preview_channel(int64_t c, float cur_min, float cur_max, float& lo, float& hi) const = 0;
  // Changes whenever the state does (a fold, a reset, a load): a preview is
  // valid while this is what it was.
  virtual std::pair<uint64_t, uint64_t> state_version() const = 0;
  // The state's range of channel c after the fold.
  virtual void channel_range(int64_t c, float& lo, float& hi) const = 0;
  // Once after the last channel of an observation.
  virtual void end_fold() = 0;
  // fold_channel(c) of one row's min/max (n values, NaNs ignored, as
  // observe()), then channel_range(c): the range channel c's qparams follow.
  void fold_row(int64_t c, const float* row, int64_t n, float& lo, float& hi);
};

}  // namespace qat::quant
