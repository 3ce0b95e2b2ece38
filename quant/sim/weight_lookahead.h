#pragma once
// Note [weight lookahead]
// A per-channel weight's fake quantization (observe_and_fake_quantize's fused
// path) reads the whole weight every forward: for AlexNet's 57M weights a
// pass over 230 MB, as long as SGD's own pass over it. When the weight is a
// parameter the optimizer updates block by block (Note [update hooks]), the
// same work is done inside the optimizer's pass: each block of rows, just
// written and still in cache, is reduced to its per-channel min/max, folded
// through the observer as a preview (the observer's state is not changed),
// turned into qparams and fake-quantized, mask bits included. The next
// forward takes that result and folds the observer as the fused path would
// have: the same output, mask, qparams and observer state, bit for bit.
//
// The result is taken only if nothing it depends on changed since: the same
// tensor, on the same storage, at the version the optimizer left it; the
// observer's state at the version it was previewed at; the forward observing
// in training mode. Otherwise, and after an error (a non-finite weight), the
// forward computes as before. A forward that does not observe (eval, the
// observer or fake quantization off, INT8 training's integer weights) drops
// the result and stops the lookahead until the next training forward. The
// cost: the result, one more copy of the weight, is held from the optimizer
// step to the next forward.
#include <atomic>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/update_hook.h"
#include "quant/observe/observer.h"
#include "quant/sim/fq_channel_rows.h"

namespace qat::quant {

// On by default; off, quantizers compute every weight at its forward (tests
// compare the two).
void set_weight_lookahead_enabled(bool on);
bool weight_lookahead_enabled();
// Results taken by forwards in this process so far (tests, bench).
int64_t weight_lookahead_taken();

class WeightLookahead final : public RowUpdateHook {
 public:
  // fold: the observer's (its spec per-channel on axis 0, channels rows).
  WeightLookahead(const QuantSpec& spec, ChannelMinMaxFold& fold, int64_t channels, SteKind ste);

  // The quantizer's forward observed w in training mode: look ahead at w's
  // next update. disarm(): stop (the quantizer is off or gone); the hook
  // then touches nothing of it.
  void arm(const Tensor& w);
  void disarm();
  bool armed_for(const Tensor& w) const;

  bool begin(const Tensor& p) override;
  void rows(int64_t r0, int64_t r1, const float* data) override;
  void end(const Tensor& p) override;

  // For the forward's observe_and_fake_quantize(x): the result computed for
  // x, the observer folded and `used` set; nullopt when there is none valid
  // for x (what was computed is dropped either way).
  std::optional<Tensor> take(const Tensor& x, QParams& used);

 private:
  QuantSpec spec_;
  ChannelMinMaxFold& fold_;
  int64_t channels_, len_ = 0;
  SteKind ste_;
  std::weak_ptr<TensorImpl> armed_;
  // One update's result: the rows, each channel's own min/max (folded when
  // taken), what it was computed from; ready once end() saw no error.
  std::unique_ptr<ChannelRows> result_;
  std::vector<float> cur_min_, cur_max_;
  std::atomic<bool> failed_{false};
  bool ready_ = false;
  std::weak_ptr<Storage> storage_;  // with the version: a model moved away and back restarts the count
  uint64_t weight_version_ = 0;
  std::pair<uint64_t, uint64_t> state_version_{};
};

}  // namespace qat::quant
