#include "quant/sim/bn_reestimation.h"

#include <vector>

#include "core/autograd.h"
#include "layers/layers.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"

namespace qat::quant {

namespace {

// What the pass changes, and puts back when it ends (also on an error).
class PassSettings {
 public:
  explicit PassSettings(Module& model) {
    for (auto& [name, m] : model.named_modules()) {
      if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) norms_.push_back({bn, bn->momentum});
      if (auto* conv = dynamic_cast<QatConv2d*>(m); conv && conv->bn) frozen_.push_back({conv, conv->bn_frozen()});
    }
    for (FakeQuantizer* f : fake_quantizers(model)) observers_.push_back({f, f->observer_enabled()});
    for (auto& [conv, was] : frozen_) conv->set_bn_frozen(false);
    for (auto& [f, was] : observers_) f->set_observer_enabled(false);
  }
  ~PassSettings() {
    for (auto& [bn, momentum] : norms_) bn->momentum = momentum;
    for (auto& [conv, was] : frozen_) conv->set_bn_frozen(was);
    for (auto& [f, was] : observers_) f->set_observer_enabled(was);
  }
  PassSettings(const PassSettings&) = delete;
  PassSettings& operator=(const PassSettings&) = delete;

  // Before the i-th batch (from 1): running = (1 - 1/i) running + (1/i) batch.
  void set_momentum_for_batch(int64_t i) {
    for (auto& [bn, momentum] : norms_) bn->momentum = 1.f / static_cast<float>(i);
  }

 private:
  std::vector<std::pair<BatchNorm2d*, float>> norms_;
  std::vector<std::pair<QatConv2d*, bool>> frozen_;
  std::vector<std::pair<FakeQuantizer*, bool>> observers_;
};

}  // namespace

int64_t reestimate_bn_statistics(Module& model, int64_t batches, const std::function<bool(Tensor&)>& next) {
  PassSettings settings(model);
  model.train();
  NoGradGuard no_grad;
  Tensor images;
  int64_t used = 0;
  while (used < batches && next(images)) {
    settings.set_momentum_for_batch(++used);
    model.forward(images);
  }
  return used;
}

}  // namespace qat::quant
