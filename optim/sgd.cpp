#include "optim/sgd.h"

namespace qat {

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : Optimizer(std::move(groups)), opt_(options) {
  QAT_CHECK(opt_.momentum >= 0.0, "SGD: momentum must be >= 0, got ", opt_.momentum);
  QAT_CHECK(!opt_.nesterov || (opt_.momentum > 0.0 && opt_.dampening == 0.0),
            "SGD: nesterov needs momentum > 0 and dampening 0, got momentum ", opt_.momentum, ", dampening ",
            opt_.dampening);
  for (const ParamGroup& g : param_groups())
    QAT_CHECK(g.lr >= 0.0 && g.weight_decay >= 0.0, "SGD: group '", g.name,
              "' needs lr >= 0 and weight_decay >= 0, got lr ", g.lr, ", weight_decay ", g.weight_decay);
}

std::vector<std::string> SGD::buffer_names() const {
  if (opt_.momentum == 0.0) return {};
  return {"momentum"};
}

void SGD::update(const ParamGroup& group, float* p, const float* g, int64_t n, ParamState& s) {
  const float lr = static_cast<float>(group.lr);
  const float wd = static_cast<float>(group.weight_decay);
  if (opt_.momentum == 0.0) {
#pragma omp parallel for schedule(static) if (n >= kOptimParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
    return;
  }
  const float mom = static_cast<float>(opt_.momentum);
  const float damp = static_cast<float>(1.0 - opt_.dampening);
  const bool first = s.step == 1;
  const bool nesterov = opt_.nesterov;
  float* buf = s.buffers[0].data<float>();
#pragma omp parallel for schedule(static) if (n >= kOptimParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * p[i];
    const float b = first ? d : mom * buf[i] + damp * d;
    buf[i] = b;
    p[i] -= lr * (nesterov ? d + mom * b : b);
  }
}

}  // namespace qat
