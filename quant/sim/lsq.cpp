#include "quant/sim/lsq.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops/common.h"
#include "quant/observe/channel_layout.h"
#include "quant/sim/lsq_plan.h"
#include "quant/sim/math.h"
#if QAT_WITH_CUDA
#include "quant/sim/cuda_twins.h"
#endif

namespace qat::quant {

namespace {

// Work split: Note [channel layout]. kChunk bounds the float partial sums of
// the backward (then added in double), so it decides the result bits.
constexpr int64_t kChunk = 4096;

// ---------------------------------------------------------------- forward
template <bool kPlus>
void forward_run(const float* __restrict v, float* __restrict o, int64_t n, float s, float inv, float beta, float lo,
                 float hi) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = math::lsq_value<kPlus>(v[i], s, inv, beta, lo, hi);
}

template <bool kPlus>
void forward_kernel(const float* v, float* o, const ChannelLayout& l, const LsqChannels& k, float lo, float hi) {
  if (l.channels_innermost()) {  // vectorise across channels
    const float *s = k.s.data(), *inv = k.inv.data(), *beta = k.beta.data();
    const int64_t c = l.channels;
#pragma omp parallel for if (l.numel() > detail::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < l.outer; ++r) {
      const float* vr = v + r * c;
      float* orow = o + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) orow[j] = math::lsq_value<kPlus>(vr[j], s[j], inv[j], beta[j], lo, hi);
    }
    return;
  }
  const int64_t items = l.run_count(kChunk);
#pragma omp parallel for if (l.numel() > detail::kParallelGrain) schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    const ChannelLayout::Run r = l.run(item, kChunk);
    forward_run<kPlus>(v + r.offset, o + r.offset, r.length, k.s[r.channel], k.inv[r.channel], k.beta[r.channel], lo,
                       hi);
  }
}

// ---------------------------------------------------------------- backward
template <bool kPlus, LsqClip kClip>
inline math::LsqGrad elem(float v, float g, float inv, float beta, float lo, float hi) {
  return math::lsq_grad<kPlus, kClip == LsqClip::paper>(v, g, inv, beta, lo, hi);
}

// Sums of the step and offset terms of one run; writes dv when dv != nullptr.
template <bool kPlus, LsqClip kClip, bool kDv>
void backward_run(const float* __restrict v, const float* __restrict g, float* __restrict dv, int64_t n, float inv,
                  float beta, float lo, float hi, double& ds_acc, double& db_acc) {
  float ds = 0.f, db = 0.f;
#pragma omp simd reduction(+ : ds, db)
  for (int64_t i = 0; i < n; ++i) {
    const auto e = elem<kPlus, kClip>(v[i], g[i], inv, beta, lo, hi);
    if constexpr (kDv) dv[i] = e.dv;
    ds += e.ds;
    if constexpr (kPlus) db += e.db;
  }
  ds_acc += ds;
  db_acc += db;
}

// Fills dv (if non-null) and returns per-channel sums [ds(C), db(C)] in double.
// Each thread accumulates into its own slice; slices are added in thread
// order, so the result does not depend on scheduling.
template <bool kPlus, LsqClip kClip, bool kDv>
std::vector<double> backward_kernel(const float* v, const float* g, float* dv, const ChannelLayout& l, const LsqChannels& k,
                                    float lo, float hi) {
  const int64_t c = l.channels;
  const bool parallel = l.numel() > detail::kParallelGrain;
  const int nt = parallel ? omp_get_max_threads() : 1;
  std::vector<double> acc(static_cast<size_t>(nt) * 2 * c, 0.0);
  if (l.channels_innermost()) {  // vectorise across channels
    const float *inv = k.inv.data(), *beta = k.beta.data();
#pragma omp parallel if (parallel)
    {
      double* ds = acc.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * c;
      double* db = ds + c;
#pragma omp for schedule(static)
      for (int64_t r = 0; r < l.outer; ++r) {
        const float* vr = v + r * c;
        const float* gr = g + r * c;
        float* dr = kDv ? dv + r * c : nullptr;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const auto e = elem<kPlus, kClip>(vr[j], gr[j], inv[j], beta[j], lo, hi);
          if constexpr (kDv) dr[j] = e.dv;
          ds[j] += e.ds;
          if constexpr (kPlus) db[j] += e.db;
        }
      }
    }
  } else {
    const int64_t items = l.run_count(kChunk);
#pragma omp parallel if (parallel)
    {
      double* ds = acc.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * c;
      double* db = ds + c;
#pragma omp for schedule(static)
      for (int64_t item = 0; item < items; ++item) {
        const ChannelLayout::Run r = l.run(item, kChunk);
        const int64_t ch = r.channel;
        backward_run<kPlus, kClip, kDv>(v + r.offset, g + r.offset, kDv ? dv + r.offset : nullptr, r.length,
                                        k.inv[ch], k.beta[ch], lo, hi, ds[ch], db[ch]);
      }
    }
  }
  for (int t = 1; t < nt; ++t)
    for (int64_t j = 0; j < 2 * c; ++j) acc[j] += acc[static_cast<size_t>(t) * 2 * c + j];
  acc.resize(2 * c);
  return acc;
}

template <bool kPlus>
std::vector<double> backward_dispatch(LsqClip clip, bool need_dv, const float* v, const float* g, float* dv,
                                      const ChannelLayout& l, const LsqChannels& k, float lo, float hi) {
  if (clip == LsqClip::paper)
    return need_dv ? backward_kernel<kPlus, LsqClip::paper, true>(v, g, dv, l, k, lo, hi)
                   : backward_kernel<kPlus, LsqClip::paper, false>(v, g, dv, l, k, lo, hi);
  return need_dv ? backward_kernel<kPlus, LsqClip::rounded, true>(v, g, dv, l, k, lo, hi)
                 : backward_kernel<kPlus, LsqClip::rounded, false>(v, g, dv, l, k, lo, hi);
}

// ---------------------------------------------------------------- the op
Tensor lsq_impl(const char* op, const Tensor& v, const Tensor& step, const Tensor* offset, const QuantSpec& spec,
                float grad_scale, LsqClip clip) {
  QAT_PROFILE("lsq.forward");
  check_lsq_args(op, v, step, offset, spec, grad_scale);
#if QAT_WITH_CUDA
  if (v.device() == Device::cuda) return cuda_twin::lsq_quantize(op, v, step, offset, spec, grad_scale, clip);
#endif
  const bool plus = offset != nullptr;
  const float floor = lsq_min_step(spec);
  const float lo = static_cast<float>(spec.qmin()), hi = static_cast<float>(spec.qmax());
  const ChannelLayout l = ChannelLayout::of(v, spec.per_channel, spec.axis);
  const LsqChannels k = lsq_channel_constants(step, plus ? *offset : Tensor(), floor);

  Tensor vc = v.contiguous();
  Tensor out = Tensor::empty(v.sizes());
  if (plus)
    forward_kernel<true>(vc.data<float>(), out.data<float>(), l, k, lo, hi);
  else
    forward_kernel<false>(vc.data<float>(), out.data<float>(), l, k, lo, hi);

  auto backward = [sv = Saved(vc), sp = Saved(step), so = Saved(plus ? *offset : Tensor()), spec, grad_scale, clip,
                   floor, lo, hi, plus, op](const Tensor& grad, const NeedGrad& need) {
    QAT_PROFILE("lsq.backward");
    const Tensor& v = sv.get(op);
    const Tensor& p = sp.get(op);
    const Tensor off = plus ? so.get(op) : Tensor();
    const ChannelLayout l = ChannelLayout::of(v, spec.per_channel, spec.axis);
    const LsqChannels k = lsq_channel_constants(p, off, floor);
    Tensor gc = grad.contiguous();
    Tensor dv;
    if (need[0]) dv = Tensor::empty(v.sizes());
    float* pdv = need[0] ? dv.data<float>() : nullptr;
    const std::vector<double> sums =
        plus ? backward_dispatch<true>(clip, need[0], v.data<float>(), gc.data<float>(), pdv, l, k, lo, hi)
             : backward_dispatch<false>(clip, need[0], v.data<float>(), gc.data<float>(), pdv, l, k, lo, hi);
    const int64_t c = l.channels;
    TensorList grads{dv, Tensor()};
    if (need[1]) {  // dL/dp = sign(p) dL/ds: Note [LSQ step positivity]
      Tensor ds = Tensor::empty(p.sizes());
      float* pd = ds.data<float>();
      for (int64_t j = 0; j < c; ++j) pd[j] = static_cast<float>(sums[j] * grad_scale) * k.sign[j];
      grads[1] = ds;
    }
    if (plus) {
      Tensor db;
      if (need[2]) {
        db = Tensor::empty(off.sizes());
        float* pd = db.data<float>();
        for (int64_t j = 0; j < c; ++j) pd[j] = static_cast<float>(sums[c + j] * grad_scale);
      }
      grads.push_back(db);
    }
    return grads;
  };
  if (plus) return record(out, op, {&v, &step, offset}, std::move(backward));
  return record(out, op, {&v, &step}, std::move(backward));
}

// ---------------------------------------------------------------- statistics for init
// Per channel (or one for the whole tensor): mean |v|, mean, std (population),
// min, max, accumulated in double.
struct Stats {
  std::vector<double> abs_mean, mean, std, min, max;
};

Stats channel_stats(const Tensor& v, const QuantSpec& spec, bool per_channel, const char* op) {
  detail::check_f32_any_device(v, op, "input");
  QAT_CHECK(v.numel() > 0, op, ": empty input ", v.sizes());
  if (per_channel)
    QAT_CHECK(spec.axis < v.dim(), op, ": channel axis ", spec.axis, " out of range for input ", v.sizes());
  const ChannelLayout l = ChannelLayout::of(v, per_channel, spec.axis);
  const int64_t c = l.channels;
  // Once per quantizer (its initialisation): a cuda tensor is read on the host.
  Tensor vc = v.to(Device::cpu).contiguous();
  const float* pv = vc.data<float>();
  std::vector<double> sa(c, 0.0), sm(c, 0.0), sq(c, 0.0), mn(c, INFINITY), mx(c, -INFINITY);
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t j = 0; j < c; ++j) {
      const float* r = pv + (o * c + j) * l.inner;
      double a = 0, m = 0;
      float lo = mn[j], hi = mx[j];
      for (int64_t i = 0; i < l.inner; ++i) {
        a += std::fabs(r[i]);
        m += r[i];
        lo = std::min(lo, r[i]);
        hi = std::max(hi, r[i]);
      }
      sa[j] += a, sm[j] += m, mn[j] = lo, mx[j] = hi;
    }
  const double n = static_cast<double>(l.outer * l.inner);
  for (int64_t j = 0; j < c; ++j) sm[j] /= n, sa[j] /= n;
  // second pass for the variance (numerically safer than E[v²] - E[v]²)
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t j = 0; j < c; ++j) {
      const float* r = pv + (o * c + j) * l.inner;
      double q = 0;
      for (int64_t i = 0; i < l.inner; ++i) q += (r[i] - sm[j]) * (r[i] - sm[j]);
      sq[j] += q;
    }
  Stats st;
  st.abs_mean = sa, st.mean = sm, st.min = mn, st.max = mx;
  st.std.resize(c);
  for (int64_t j = 0; j < c; ++j) st.std[j] = std::sqrt(sq[j] / n);
  return st;
}

}  // namespace

LsqChannels lsq_channel_constants(const Tensor& step, const Tensor& offset, float floor) {
  const int64_t c = step.numel();
  LsqChannels k;
  k.s.resize(c), k.inv.resize(c), k.beta.assign(c, 0.f), k.sign.resize(c);
  const std::vector<float> p = step.to_vector();
  for (int64_t i = 0; i < c; ++i) {
    k.s[i] = std::max(std::fabs(p[i]), floor);
    k.inv[i] = 1.f / k.s[i];
    k.sign[i] = p[i] < 0.f ? -1.f : 1.f;
  }
  if (offset.defined()) k.beta = offset.to_vector();
  return k;
}

void check_lsq_args(const char* op, const Tensor& v, const Tensor& step, const Tensor* offset, const QuantSpec& spec,
                    float grad_scale) {
  spec.validate(op);
  QAT_CHECK(spec.formula != ScaleFormula::power_of_two, op,
            ": a learned step cannot honour power_of_two scales (spec ", spec.describe(), ")");
  detail::check_f32_any_device(v, op, "input");
  detail::check_f32_any_device(step, op, "step");
  auto check_param = [&](const Tensor& t, const char* what) {
    if (spec.per_channel) {
      QAT_CHECK(spec.axis < v.dim(), op, ": channel axis ", spec.axis, " out of range for input ", v.sizes());
      QAT_CHECK(t.dim() == 1 && t.size(0) == v.size(spec.axis), op, ": per-channel ", what, " must have shape (",
                v.size(spec.axis), ") for input ", v.sizes(), " and axis ", spec.axis, ", got ", t.sizes());
    } else {
      QAT_CHECK(t.numel() == 1 && t.dim() <= 1, op, ": per-tensor ", what, " must have shape (1), got ", t.sizes());
    }
  };
  check_param(step, "step");
  if (offset) {
    detail::check_f32_any_device(*offset, op, "offset");
    check_param(*offset, "offset");
    detail::check_same_device(op, {{"input", &v}, {"step", &step}, {"offset", offset}});
  } else {
    detail::check_same_device(op, {{"input", &v}, {"step", &step}});
  }
  QAT_CHECK(std::isfinite(grad_scale), op, ": grad_scale must be finite, got ", grad_scale);
}

float lsq_min_step(const QuantSpec& spec) { return std::max(spec.min_scale, kLsqStepFloor); }

Tensor lsq_quantize(const Tensor& v, const Tensor& step, const QuantSpec& spec, float grad_scale, LsqClip clip) {
  return lsq_impl("lsq_quantize", v, step, nullptr, spec, grad_scale, clip);
}

Tensor lsq_plus_quantize(const Tensor& v, const Tensor& step, const Tensor& offset, const QuantSpec& spec,
                         float grad_scale, LsqClip clip) {
  QAT_CHECK(offset.defined(), "lsq_plus_quantize: offset is undefined");
  return lsq_impl("lsq_plus_quantize", v, step, &offset, spec, grad_scale, clip);
}

float lsq_grad_scale(int64_t numel_per_step, const QuantSpec& spec) {
  spec.validate("lsq_grad_scale");
  QAT_CHECK(numel_per_step > 0, "lsq_grad_scale: numel_per_step must be > 0, got ", numel_per_step);
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(numel_per_step) * spec.qmax()));
}

Tensor lsq_step_value(const Tensor& step_param, const QuantSpec& spec) {
  detail::check_f32_any_device(step_param, "lsq_step_value", "step");
  const float floor = lsq_min_step(spec);
  std::vector<float> p = step_param.to_vector();
  for (float& x : p) x = std::max(std::fabs(x), floor);
  return Tensor::from_vector(p, step_param.sizes());
}

float lsq_init_step(const Tensor& v, const QuantSpec& spec) {
  spec.validate("lsq_init_step");
  const Stats st = channel_stats(v, spec, false, "lsq_init_step");
  const float s = static_cast<float>(2.0 * st.abs_mean[0] / std::sqrt(static_cast<double>(spec.qmax())));
  return std::max(s, lsq_min_step(spec));
}

Tensor lsq_init_step_per_channel(const Tensor& v, const QuantSpec& spec) {
  spec.validate("lsq_init_step_per_channel");
  const Stats st = channel_stats(v, spec, true, "lsq_init_step_per_channel");
  const int64_t c = static_cast<int64_t>(st.abs_mean.size());
  std::vector<float> s(c);
  for (int64_t j = 0; j < c; ++j)
    s[j] = std::max(static_cast<float>(2.0 * st.abs_mean[j] / std::sqrt(static_cast<double>(spec.qmax()))),
                    lsq_min_step(spec));
  return Tensor::from_vector(s, {c});
}

Tensor lsq_init_steps(const Tensor& v, const QuantSpec& spec) {
  return spec.per_channel ? lsq_init_step_per_channel(v, spec) : Tensor::from_vector({lsq_init_step(v, spec)}, {1});
}

LsqPlusParams lsq_plus_init(const Tensor& v, const QuantSpec& spec, LsqPlusInit method) {
  spec.validate("lsq_plus_init");
  const Stats st = channel_stats(v, spec, spec.per_channel, "lsq_plus_init");
  const int64_t c = static_cast<int64_t>(st.mean.size());
  const double qmin = spec.qmin(), qmax = spec.qmax();
  std::vector<float> s(c), b(c);
  for (int64_t j = 0; j < c; ++j) {
    double lo = st.min[j], hi = st.max[j];
    if (method == LsqPlusInit::mean_std) {
      lo = std::max(lo, st.mean[j] - 3.0 * st.std[j]);
      hi = std::min(hi, st.mean[j] + 3.0 * st.std[j]);
    }
    lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
    s[j] = std::max(static_cast<float>((hi - lo) / (qmax - qmin)), lsq_min_step(spec));
    b[j] = static_cast<float>(lo - qmin * s[j]);
  }
  return {Tensor::from_vector(s, {c}), Tensor::from_vector(b, {c})};
}

}  // namespace qat::quant
