#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
// GCC 12's AVX-512 headers trip a false -Wmaybe-uninitialized (_mm512_undefined_ps).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <experimental/simd>
#pragma GCC diagnostic pop

#include "optim/math.h"
#if QAT_WITH_CUDA
#include "optim/cuda_twins.h"
#endif

namespace qat {

namespace {

namespace stdx = std::experimental;
using FloatVec = stdx::native_simd<float>;

// sqrt for float (std::sqrt) or FloatVec (stdx::sqrt).
struct SqrtOf {
  template <class T>
  T operator()(const T& x) const {
    using std::sqrt;
    using stdx::sqrt;
    return sqrt(x);
  }
};

// Scalars as torch computes them: in double (from the float32-rounded lr,
// see Note [optimizer state_dict]), then used in float32.
optim_math::AdamWCoefs adamw_coefs(const ParamGroup& group, const AdamWOptions& opt, const ParamState& s) {
  const double lr = static_cast<float>(group.lr);
  const double t = static_cast<double>(s.step);
  return {static_cast<float>(1.0 - lr * group.weight_decay),
          static_cast<float>(opt.beta1),
          static_cast<float>(1.0 - opt.beta1),
          static_cast<float>(opt.beta2),
          static_cast<float>(1.0 - opt.beta2),
          static_cast<float>(lr / (1.0 - std::pow(opt.beta1, t))),
          static_cast<float>(std::sqrt(1.0 - std::pow(opt.beta2, t))),
          static_cast<float>(opt.eps)};
}

}  // namespace

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Optimizer(std::move(groups)), opt_(options) {
  QAT_CHECK(opt_.beta1 >= 0.0 && opt_.beta1 < 1.0 && opt_.beta2 >= 0.0 && opt_.beta2 < 1.0,
            "AdamW: betas must be in [0, 1), got (", opt_.beta1, ", ", opt_.beta2, ")");
  QAT_CHECK(opt_.eps >= 0.0, "AdamW: eps must be >= 0, got ", opt_.eps);
  for (const ParamGroup& g : param_groups())
    QAT_CHECK(g.lr >= 0.0 && g.weight_decay >= 0.0, "AdamW: group '", g.name,
              "' needs lr >= 0 and weight_decay >= 0, got lr ", g.lr, ", weight_decay ", g.weight_decay);
}

// The loop is written with std::experimental::simd because a plain loop
// calling std::sqrt is not vectorized by GCC (sqrt may set errno); as a plain
// loop the step is about 5x slower on AlexNet's 58M parameters. Blocks have a fixed size
// (a multiple of the SIMD width), so results do not depend on the thread count.
void AdamW::update(const ParamGroup& group, float* p, const float* g, int64_t n, ParamState& s) {
  const optim_math::AdamWCoefs c = adamw_coefs(group, opt_, s);
  float* m = s.buffers[0].data<float>();
  float* v = s.buffers[1].data<float>();
  constexpr int64_t W = FloatVec::size();
  constexpr int64_t kBlock = 4096;
  static_assert(kBlock % W == 0);
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kOptimParallelMin)
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t hi = std::min(n, (b + 1) * kBlock);
    int64_t i = b * kBlock;
    for (; i + W <= hi; i += W) {
      FloatVec pv(p + i, stdx::element_aligned), mv(m + i, stdx::element_aligned);
      FloatVec vv(v + i, stdx::element_aligned), gv(g + i, stdx::element_aligned);
      optim_math::adamw_update(pv, mv, vv, gv, c, SqrtOf{});
      pv.copy_to(p + i, stdx::element_aligned);
      mv.copy_to(m + i, stdx::element_aligned);
      vv.copy_to(v + i, stdx::element_aligned);
    }
    for (; i < hi; ++i) {
      float gi = g[i];
      optim_math::adamw_update(p[i], m[i], v[i], gi, c, SqrtOf{});
    }
  }
}

#if QAT_WITH_CUDA
void AdamW::update_on_device(const ParamGroup& group, const Tensor& p, const Tensor& g, ParamState& s) {
  cuda_twin::adamw_update(p.device_data<float>(), g.device_data<float>(), s.buffers[0].device_data<float>(),
                          s.buffers[1].device_data<float>(), p.numel(), adamw_coefs(group, opt_, s));
}
#endif

}  // namespace qat
