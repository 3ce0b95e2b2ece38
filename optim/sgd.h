#pragma once
// SGD as torch.optim.SGD (maximize=False), per parameter with gradient grad:
//   g = grad + wd * p                                  (wd: the group's weight_decay)
//   momentum != 0:
//     buf = g                              on the parameter's first update
//     buf = momentum * buf + (1 - dampening) * g       afterwards
//     g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// State: buffer "momentum" (only when momentum != 0). See Note [optimizer state_dict].
#include "optim/optimizer.h"

namespace qat {

struct SGDOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0 (as in PyTorch)
};

class SGD : public ElementwiseOptimizer<SGDOptions> {
 public:
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});

 protected:
  std::vector<std::string> buffer_names() const override;
  void update_span(const ParamGroup& group, float* p, const float* g, int64_t begin, int64_t end,
                   ParamState& s) override;
#if QAT_WITH_CUDA
  void update_on_device(const ParamGroup& group, const Tensor& p, const Tensor& g, ParamState& s) override;
#endif
  const char* name() const override { return "SGD"; }
};

}  // namespace qat
