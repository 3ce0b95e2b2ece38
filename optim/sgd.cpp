#include "optim/sgd.h"

#include "optim/math.h"
#if QAT_WITH_CUDA
#include "optim/cuda_twins.h"
#endif

namespace qat {

namespace {

optim_math::SgdCoefs sgd_coefs(const ParamGroup& group, const SGDOptions& opt, const ParamState& s) {
  optim_math::SgdCoefs c;
  c.lr = static_cast<float>(group.lr);
  c.weight_decay = static_cast<float>(group.weight_decay);
  c.momentum = static_cast<float>(opt.momentum);
  c.damp_keep = static_cast<float>(1.0 - opt.dampening);
  c.first = s.step == 1;
  c.nesterov = opt.nesterov;
  return c;
}

}  // namespace

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : ElementwiseOptimizer(std::move(groups), options) {
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

void SGD::update_span(const ParamGroup& group, float* p, const float* g, int64_t begin, int64_t end, ParamState& s) {
  const optim_math::SgdCoefs c = sgd_coefs(group, opt_, s);
  if (opt_.momentum == 0.0) {
    for (int64_t i = begin; i < end; ++i) optim_math::sgd_plain_update(p[i], g[i], c);
    return;
  }
  float* buf = s.buffers[0].data<float>();
  for (int64_t i = begin; i < end; ++i) optim_math::sgd_momentum_update(p[i], buf[i], g[i], c);
}

#if QAT_WITH_CUDA
void SGD::update_on_device(const ParamGroup& group, const Tensor& p, const Tensor& g, ParamState& s) {
  float* buf = opt_.momentum == 0.0 ? nullptr : s.buffers[0].device_data<float>();
  cuda_twin::sgd_update(p.device_data<float>(), g.device_data<float>(), buf, p.numel(), sgd_coefs(group, opt_, s));
}
#endif

}  // namespace qat
