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
// The mean of each adaptive window of x (N, C, H, W) in double: exact to
// far below a step for any window qat pools (Note [a mean rounded onto its
// grid]).
std::vector<double> window_means(const Tensor& x, int64_t oh, int64_t ow) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const float* px = x.data<float>();
  std::vector<double> means(static_cast<size_t>(planes * oh * ow));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const AdaptiveWindow wh = adaptive_window(i, H, oh), ww = adaptive_window(j, W, ow);
        double sum = 0;
        for (int64_t a = wh.begin; a < wh.end; ++a)
          for (int64_t b = ww.begin; b < ww.end; ++b) sum += px[(p * H + a) * W + b];
        means[(p * oh + i) * ow + j] = sum / static_cast<double>(wh.size() * ww.size());
      }
  return means;
}

// What to add to each mean y so that the quantizer rounds it as the integer
// kernel does: a, y rounded to nearest, moved k steps, k = floor(d + 1/2 +
// tol) for d = (exact mean - a) / s (d = 1/2 exactly on a tie: k = 1), tol =
// 1 / (4 count) above the error of d and below any non-tie's distance from a
// half step. The move lands on a grid point (within float rounding), which
// the quantizer then returns exactly.
Tensor moves_to_integer_rounding(const Tensor& x, const Tensor& y, const Tensor& a, float s) {
  const int64_t oh = y.size(2), ow = y.size(3), H = x.size(2), W = x.size(3);
  const std::vector<double> mean = window_means(x, oh, ow);
  const float* py = y.data<float>();
  const float* pa = a.data<float>();
  std::vector<double> tolerance(static_cast<size_t>(oh * ow));  // 1 / (4 count), per output position
  for (int64_t k = 0; k < oh * ow; ++k)
    tolerance[k] = 0.25 / static_cast<double>(adaptive_window(k / ow, H, oh).size() * adaptive_window(k % ow, W, ow).size());
  std::vector<float> moves(static_cast<size_t>(y.numel()));
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double d = (mean[static_cast<size_t>(i)] - static_cast<double>(pa[i])) / static_cast<double>(s);
    const double steps = std::floor(d + 0.5 + tolerance[i % (oh * ow)]);
    moves[static_cast<size_t>(i)] = static_cast<float>(static_cast<double>(pa[i]) + steps * s - py[i]);
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
  // (the quantizer on the model's device, the arithmetic of the moves on the CPU)
  const Tensor a = source.apply_frozen(y.detach()).to(Device::cpu);
  const Tensor moves = moves_to_integer_rounding(x.detach().to(Device::cpu), y.detach().to(Device::cpu), a,
                                                 scale.data<float>()[0]);
  return shared_->forward(add(y, moves.to(y.device())));
}

}  // namespace qat::quant
