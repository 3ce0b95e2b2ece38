#include "quant/sim/avg_pool_on_grid.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/window.h"

namespace qat::quant {

AvgPoolOnGrid::AvgPoolOnGrid(std::shared_ptr<Module> pool, std::shared_ptr<SharedFakeQuantizer> shared)
    : Sequential(std::vector<ModulePtr>{pool, shared}),
      pool_(dynamic_cast<AdaptiveAvgPool2d*>(pool.get())),
      shared_(shared.get()) {
  QAT_CHECK(pool_ != nullptr, "AvgPoolOnGrid: expected an AdaptiveAvgPool2d, got ", pool->type_name());
}

namespace {
// A quarter step (s / 4) where a mean of y lies on a tie between two steps,
// 0 elsewhere (Note [a mean rounded onto its grid]); y (N, C, OH, OW) the
// means of (H, W) windows, a the same rounded to nearest.
Tensor tie_moves(const Tensor& y, const Tensor& a, float s, int64_t in_h, int64_t in_w) {
  const int64_t oh = y.size(2), ow = y.size(3), planes = y.size(0) * y.size(1);
  std::vector<double> tolerance(static_cast<size_t>(oh * ow));
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j)
      tolerance[i * ow + j] = 0.25 / static_cast<double>(adaptive_window(i, in_h, oh).size() *
                                                         adaptive_window(j, in_w, ow).size());
  const float* py = y.data<float>();
  const float* pa = a.data<float>();
  std::vector<float> moves(static_cast<size_t>(y.numel()), 0.f);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t k = 0; k < oh * ow; ++k) {
      const int64_t i = p * oh * ow + k;
      const double d = (static_cast<double>(py[i]) - static_cast<double>(pa[i])) / static_cast<double>(s);
      if (std::fabs(std::fabs(d) - 0.5) <= tolerance[k]) moves[i] = 0.25f * s;
    }
  return Tensor::from_vector(moves, y.sizes());
}
}  // namespace

Tensor AvgPoolOnGrid::forward(const Tensor& x) {
  const Tensor y = pool_->forward(x);
  const FakeQuantizer& source = *shared_->source();
  if (!source.fake_quant_enabled()) return y;
  const Tensor scale = source.qparams().scale.to(Device::cpu);
  QAT_CHECK(scale.numel() == 1 && x.dim() == 4, "AvgPoolOnGrid: expected a per-tensor grid and an (N,C,H,W) input, "
            "got ", scale.numel(), " scales and input ", x.sizes());
  const Tensor y_cpu = y.detach().to(Device::cpu);
  const Tensor moves = tie_moves(y_cpu, source.apply_frozen(y_cpu), scale.data<float>()[0], x.size(2), x.size(3));
  return shared_->forward(add(y, moves.to(y.device())));
}

}  // namespace qat::quant
