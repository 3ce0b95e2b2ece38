#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
// GCC 12's AVX-512 headers trip a false -Wmaybe-uninitialized (_mm512_undefined_ps);
// Clang has no such warning (and warns about the unknown name).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <experimental/simd>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

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

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : ElementwiseOptimizer(std::move(groups), options) {
  QAT_CHECK(opt_.beta1 >= 0.0 && opt_.beta1 < 1.0 && opt_.beta2 >= 0.0 && opt_.beta2 < 1.0,
            "AdamW: betas must be in [0, 1), got (", opt_.beta1, ", ", opt_.beta2, ")");
  QAT_CHECK(opt_.eps >= 0.0, "AdamW: eps must be >= 0, got ", opt_.eps);
  for (const ParamGroup& g : param_groups())
    QAT_CHECK(g.lr >= 0.0 && g.weight_decay >= 0.0, "AdamW: group '", g.name,
              "' needs lr >= 0 and weight_decay >= 0, got lr ", g.lr, ", weight_decay ", g.weight_decay);
}

// The loop is written with std::experimental::simd because a plain loop
// calling std::sqrt is not vectorized by GCC (sqrt may set errno); as a plain
// loop the step is about 5x slower on AlexNet's 58M parameters.
//
// Which elements run as vectors is fixed by the parameter alone, not by the
// span, so that every split into spans (the base's chunks over the threads,
// the row blocks of an update hook) gives the same bits: the vectors sit at
// multiples of W up to the last whole one (n / W * W), the rest run one by
// one. A vector that a span's edge cuts runs on a copy of the span's own
// elements (the others belong to another span, perhaps being written by
// another thread); the lanes are independent, so each element gets what it
// gets in a whole vector.
void AdamW::update_span(const ParamGroup& group, float* p, const float* g, int64_t begin, int64_t end, ParamState& s) {
  const optim_math::AdamWCoefs c = adamw_coefs(group, opt_, s);
  float* m = s.buffers[0].data<float>();
  float* v = s.buffers[1].data<float>();
  constexpr int64_t W = FloatVec::size();
  const int64_t vector_end = std::min(end, s.buffers[0].numel() / W * W);
  auto vector_at = [&](float* pp, float* mp, float* vp, const float* gp) {
    FloatVec pv(pp, stdx::element_aligned), mv(mp, stdx::element_aligned);
    FloatVec vv(vp, stdx::element_aligned), gv(gp, stdx::element_aligned);
    optim_math::adamw_update(pv, mv, vv, gv, c, SqrtOf{});
    pv.copy_to(pp, stdx::element_aligned);
    mv.copy_to(mp, stdx::element_aligned);
    vv.copy_to(vp, stdx::element_aligned);
  };
  // elements [i0, i1) of one cut vector, through copies
  auto cut_vector = [&](int64_t i0, int64_t i1) {
    float tp[W] = {}, tm[W] = {}, tv[W] = {}, tg[W] = {};
    const auto k = static_cast<size_t>(i1 - i0) * sizeof(float);
    std::memcpy(tp, p + i0, k), std::memcpy(tm, m + i0, k), std::memcpy(tv, v + i0, k), std::memcpy(tg, g + i0, k);
    vector_at(tp, tm, tv, tg);
    std::memcpy(p + i0, tp, k), std::memcpy(m + i0, tm, k), std::memcpy(v + i0, tv, k);
  };
  int64_t i = begin;
  if (i < vector_end && i % W != 0) {
    const int64_t stop = std::min(vector_end, (i / W + 1) * W);
    cut_vector(i, stop);
    i = stop;
  }
  for (; i + W <= vector_end; i += W) vector_at(p + i, m + i, v + i, g + i);
  if (i < vector_end) cut_vector(i, vector_end), i = vector_end;
  for (; i < end; ++i) {
    float gi = g[i];
    optim_math::adamw_update(p[i], m[i], v[i], gi, c, SqrtOf{});
  }
}

#if QAT_WITH_CUDA
void AdamW::update_on_device(const ParamGroup& group, const Tensor& p, const Tensor& g, ParamState& s) {
  cuda_twin::adamw_update(p.device_data<float>(), g.device_data<float>(), s.buffers[0].device_data<float>(),
                          s.buffers[1].device_data<float>(), p.numel(), adamw_coefs(group, opt_, s));
}
#endif

}  // namespace qat
