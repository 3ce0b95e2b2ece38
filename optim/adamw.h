#pragma once
// AdamW as torch.optim.AdamW (amsgrad=False, maximize=False), per parameter
// with gradient g at its t-th update (t counts its own updates):
//   p *= 1 - lr * wd                                   (decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State: buffers "exp_avg" (m) and "exp_avg_sq" (v), zero before the first
// update. See Note [optimizer state_dict].
#include "optim/optimizer.h"

namespace qat {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

class AdamW : public ElementwiseOptimizer<AdamWOptions> {
 public:
  // Note: torch's AdamW default weight_decay is 1e-2; here it is the group's.
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});

 protected:
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void update_span(const ParamGroup& group, float* p, const float* g, int64_t begin, int64_t end,
                   ParamState& s) override;
#if QAT_WITH_CUDA
  void update_on_device(const ParamGroup& group, const Tensor& p, const Tensor& g, ParamState& s) override;
#endif
  const char* name() const override { return "AdamW"; }
};

}  // namespace qat
