#include "core/ops/batch_norm.h"

#include <cmath>
#include <vector>

#include "core/collective.h"
#include "core/ops/common.h"
#include "core/ops/math.h"
#include "core/ops/scale_channels.h"
#include "core/ops/scale_channels_math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

namespace {

// A channel's sums in 8 interleaved double partial sums (element i of a
// plane goes to lane i mod 8), added in order at the end. One running sum
// is a chain of dependent adds, 4 cycles an element; the lanes vectorise.
// The order is fixed, so the sums are the same on every run.
struct DoubleLanes {
  double v[8] = {};
  template <class Term>
  void add_terms(int64_t n, Term term) {
    double w[8];  // locals: kept in registers
    for (int j = 0; j < 8; ++j) w[j] = v[j];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) w[j] += term(i + j);
    for (int j = 0; i < n; ++i, ++j) w[j] += term(i);
    for (int j = 0; j < 8; ++j) v[j] = w[j];
  }
  void add(const float* p, int64_t n) {
    add_terms(n, [p](int64_t i) { return static_cast<double>(p[i]); });
  }
  void add_squared_deviations(const float* p, int64_t n, double mu) {
    add_terms(n, [p, mu](int64_t i) {
      const double d = p[i] - mu;
      return d * d;
    });
  }
  // sum of g (x - mu), the product in float
  void add_products_with_deviations(const float* g, const float* x, int64_t n, float mu) {
    add_terms(n, [g, x, mu](int64_t i) { return static_cast<double>(g[i] * (x[i] - mu)); });
  }
  double total() const {
    double t = 0;
    for (const double x : v) t += x;
    return t;
  }
};

struct Layout {
  int64_t n, c, hw;
  int64_t m() const { return n * hw; }
};

// What is normalised: x itself, or x * s[c] (batch_norm_scaled), made one
// (n, c) plane at a time in the calling thread's buffer with scale_channels'
// float product, then read by the same code as x would be: the same bits as
// the two ops, without the scaled tensor in memory.
struct Input {
  const float* x;
  const float* s;  // null: x as is
  Layout L;
  const float* raw(int64_t n, int64_t c) const { return x + (n * L.c + c) * L.hw; }
  const float* plane(int64_t n, int64_t c) const {
    const float* p = raw(n, c);
    if (!s) return p;
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(L.hw));
    const float sc = s[c];
    for (int64_t i = 0; i < L.hw; ++i) buf[i] = p[i] * sc;
    return buf.data();
  }
};

Layout check_inputs(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& rm, const Tensor& rv) {
  detail::check_f32_any_device(x, "batch_norm", "input");
  QAT_CHECK(x.dim() == 2 || x.dim() == 4, "batch_norm: expected input (N,C) or (N,C,H,W), got ", x.sizes());
  const int64_t c = x.size(1);
  const std::pair<const Tensor*, const char*> per_channel[] = {
      {&weight, "weight"}, {&bias, "bias"}, {&rm, "running_mean"}, {&rv, "running_var"}};
  for (auto [t, name] : per_channel) {
    if (!t->defined()) continue;
    detail::check_f32_any_device(*t, "batch_norm", name);
    QAT_CHECK(t->dim() == 1 && t->size(0) == c && t->is_contiguous(), "batch_norm: expected ", name, " (", c,
              ") for input ", x.sizes(), ", got ", t->sizes());
  }
  QAT_CHECK(rm.defined() == rv.defined(), "batch_norm: running_mean and running_var must both be given or neither");
  detail::check_same_device("batch_norm", {{"input", &x}, {"weight", &weight}, {"bias", &bias},
                                           {"running_mean", &rm}, {"running_var", &rv}});
  const int64_t hw = x.dim() == 4 ? x.size(2) * x.size(3) : 1;
  return {x.size(0), c, hw};
}

// The checks and choices of every batch norm call, on any device.
struct Setup {
  Layout L;
  bool use_batch_stats;
  Collective* coll;  // sync: the statistics of the global batch of all processes (collective.h)
};

Setup setup(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
            const Tensor& running_var, bool training) {
  const Layout L = check_inputs(x, weight, bias, running_mean, running_var);
  const bool use_batch_stats = training || !running_mean.defined();
  Collective* coll = use_batch_stats && sync_batch_norm() ? collective() : nullptr;
  QAT_CHECK(!use_batch_stats || L.m() > 1 || coll, "batch_norm: training needs more than one value per channel, got "
            "input ", x.sizes());
  QAT_CHECK(x.device() != Device::cuda || !coll, "batch_norm: the statistics of the global batch of all processes "
            "(synchronised batch norm) are computed on the CPU only; input ", x.sizes(), " is on cuda");
  return {L, use_batch_stats, coll};
}

// batch_norm of x, or of x * s[c] where s is defined (CPU).
Tensor batch_norm_cpu(const Setup& setup, const Tensor& x, const Tensor& s, const Tensor& weight, const Tensor& bias,
                      const Tensor& running_mean, const Tensor& running_var, bool training, float momentum, float eps) {
  const Layout L = setup.L;
  const bool use_batch_stats = setup.use_batch_stats;
  Collective* coll = setup.coll;
  Tensor xc = x.contiguous(), sc = s.defined() ? s.contiguous() : Tensor();
  Tensor out = Tensor::empty(x.sizes());
  const Input in{xc.data<float>(), sc.defined() ? sc.data<float>() : nullptr, L};
  float* po = out.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  std::vector<float> mean(L.c), istd(L.c);
  float* rm = running_mean.defined() ? running_mean.data<float>() : nullptr;
  float* rv = running_var.defined() ? running_var.data<float>() : nullptr;

  // Two passes in double: the sums, then the squared deviations from the
  // mean (each summed over all processes when synchronised).
  double count = static_cast<double>(L.m());
  std::vector<double> sum(L.c, 0.0), sq(L.c, 0.0);
  if (use_batch_stats) {
    auto plane_sums = [&](const std::vector<double>* mu, std::vector<double>& out_sums) {
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < L.c; ++c) {
        DoubleLanes acc;
        for (int64_t n = 0; n < L.n; ++n) {
          const float* p = in.raw(n, c);
          if (in.s) {  // x * s in float, then in double: no product to fuse, so no plane to make
            const float sc = in.s[c];
            if (!mu) {
              acc.add_terms(L.hw, [p, sc](int64_t i) { return static_cast<double>(p[i] * sc); });
            } else {
              const double m = (*mu)[c];
              acc.add_terms(L.hw, [p, sc, m](int64_t i) {
                const double d = static_cast<double>(p[i] * sc) - m;
                return d * d;
              });
            }
          } else if (!mu) {
            acc.add(p, L.hw);
          } else {
            acc.add_squared_deviations(p, L.hw, (*mu)[c]);
          }
        }
        out_sums[c] = acc.total();
      }
    };
    plane_sums(nullptr, sum);
    if (coll) {
      coll->sum(sum.data(), L.c);
      coll->sum(&count, 1);
      QAT_CHECK(count > 1, "batch_norm: training needs more than one value per channel in the global batch");
    }
    std::vector<double> dmu(L.c);
    for (int64_t c = 0; c < L.c; ++c) dmu[c] = sum[c] / count;
    plane_sums(&dmu, sq);
    if (coll) coll->sum(sq.data(), L.c);
    sum = std::move(dmu);  // from here: the means
  }

#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < L.c; ++c) {
    float mu, var;
    if (use_batch_stats) {
      mu = static_cast<float>(sum[c]);
      var = static_cast<float>(sq[c] / count);
      if (training && rm) {
        const float unbiased = static_cast<float>(sq[c] / (count - 1));
        rm[c] = (1.f - momentum) * rm[c] + momentum * mu;
        rv[c] = (1.f - momentum) * rv[c] + momentum * unbiased;
      }
    } else {
      mu = rm[c];
      var = rv[c];
    }
    mean[c] = mu;
    istd[c] = op_math::bn_inv_std(var, eps);
    const float scale = istd[c] * (pw ? pw[c] : 1.f);
    const float shift = (pb ? pb[c] : 0.f) - mu * scale;
    for (int64_t n = 0; n < L.n; ++n) {
      const float* p = in.raw(n, c);
      float* q = po + (n * L.c + c) * L.hw;
      if (in.s) {  // (x * s) * scale + shift: the product rounded as the plane held it, then the same expression
        const float sc = in.s[c];
        for (int64_t i = 0; i < L.hw; ++i) q[i] = (p[i] * sc) * scale + shift;
      } else {
        for (int64_t i = 0; i < L.hw; ++i) q[i] = p[i] * scale + shift;
      }
    }
  }
  if (training && rm) {
    running_mean.impl_ptr()->storage->version++;
    running_var.impl_ptr()->storage->version++;
  }

  // Gradient slots: x, [s,] weight, bias.
  const bool scaled = in.s != nullptr;
  auto backward = [sx = Saved(xc), ss = Saved(sc), sw = Saved(weight), mean, istd, L, use_batch_stats, coll, count,
                   scaled](const Tensor& g, const NeedGrad& need) {
    QAT_PROFILE("batch_norm.backward");
    const Tensor& xv = sx.get("batch_norm");
    const Tensor& wv = sw.get("batch_norm");
    Tensor gc = g.contiguous();
    const Input in{xv.data<float>(), scaled ? ss.get("batch_norm").data<float>() : nullptr, L};
    const float* pg = gc.data<float>();
    const float* pw = wv.defined() ? wv.data<float>() : nullptr;
    const int ix = 0, is = scaled ? 1 : -1, iw = scaled ? 2 : 1, ib = iw + 1;
    const bool need_s = scaled && need[is];
    TensorList r(scaled ? 4 : 3);
    if (need[ix]) r[ix] = Tensor::empty(xv.sizes());
    if (need_s) r[is] = Tensor::empty({L.c});
    if (need[iw]) r[iw] = Tensor::empty({L.c});
    if (need[ib]) r[ib] = Tensor::empty({L.c});
    float* pdx = need[ix] ? r[ix].data<float>() : nullptr;
    const float inv_m = 1.f / static_cast<float>(count);
    // per channel: sum of g, sum of g (x - mean); over all processes when synchronised
    std::vector<double> sums(2 * L.c);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < L.c; ++c) {
      DoubleLanes sg, sgx;
      for (int64_t n = 0; n < L.n; ++n) {
        const float* p = in.plane(n, c);
        const float* q = pg + (n * L.c + c) * L.hw;
        sg.add(q, L.hw);
        sgx.add_products_with_deviations(q, p, L.hw, mean[c]);
      }
      sums[2 * c] = sg.total(), sums[2 * c + 1] = sgx.total();
    }
    // weight and bias: this process's part (the training loop sums the
    // parameter gradients of all processes); dx: the global sums
    for (int64_t c = 0; c < L.c; ++c) {
      if (need[iw]) r[iw].data<float>()[c] = static_cast<float>(sums[2 * c + 1]) * istd[c];
      if (need[ib]) r[ib].data<float>()[c] = static_cast<float>(sums[2 * c]);
    }
    if (coll) coll->sum(sums.data(), 2 * L.c);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < L.c; ++c) {
      const double sg = sums[2 * c], sgx = sums[2 * c + 1];
      const float sum_g = static_cast<float>(sg);
      const float sum_gxhat = static_cast<float>(sgx) * istd[c];
      if (!pdx && !need_s) continue;
      const float k = (pw ? pw[c] : 1.f) * istd[c];
      // scaled: the gradient d of x * s, then scale_channels' backward
      // from it (dx = d s; ds = its per-image dot products with x, in
      // double in image order: op_math::scale_channel_grad).
      thread_local std::vector<float> dbuf;
      dbuf.resize(static_cast<size_t>(L.hw));
      double ds = 0;
      for (int64_t n = 0; n < L.n; ++n) {
        const float* q = pg + (n * L.c + c) * L.hw;
        float* out_dx = pdx ? pdx + (n * L.c + c) * L.hw : nullptr;
        float* d = scaled ? dbuf.data() : out_dx;
        if (use_batch_stats) {  // (the running statistics' gradient needs no input plane)
          const float* p = in.plane(n, c);
          const float a = sum_g * inv_m, b = sum_gxhat * inv_m * istd[c];
          for (int64_t i = 0; i < L.hw; ++i) d[i] = k * (q[i] - a - (p[i] - mean[c]) * b);
        } else {
          for (int64_t i = 0; i < L.hw; ++i) d[i] = k * q[i];
        }
        if (!scaled) continue;
        const float sc = in.s[c];
        if (out_dx)
          for (int64_t i = 0; i < L.hw; ++i) out_dx[i] = d[i] * sc;
        if (need_s) ds += op_math::dot_lanes(d, in.raw(n, c), L.hw);
      }
      if (need_s) r[is].data<float>()[c] = static_cast<float>(ds);
    }
    return r;
  };
  if (scaled) return record(out, "batch_norm_scaled", {&x, &s, &weight, &bias}, std::move(backward));
  return record(out, "batch_norm", {&x, &weight, &bias}, std::move(backward));
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, float momentum, float eps) {
  QAT_PROFILE("batch_norm.forward");
  const Setup su = setup(x, weight, bias, running_mean, running_var, training);
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda)
    return cuda_twin::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);  // batch_norm.cu
#endif
  return batch_norm_cpu(su, x, Tensor(), weight, bias, running_mean, running_var, training, momentum, eps);
}

Tensor batch_norm_scaled(const Tensor& x, const Tensor& s, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, bool training, float momentum,
                         float eps) {
  detail::check_f32_any_device(s, "batch_norm_scaled", "scale");
  detail::check_f32_any_device(x, "batch_norm_scaled", "input");
  QAT_CHECK(x.dim() >= 2 && s.dim() == 1 && s.size(0) == x.size(1), "batch_norm_scaled: expected scale (",
            x.size(1), ") for input ", x.sizes(), ", got ", s.sizes());
  detail::check_same_device("batch_norm_scaled", {{"input", &x}, {"scale", &s}});
  if (x.device() == Device::cuda)  // the two ops: the same result by definition
    return batch_norm(scale_channels(x, s, 1), weight, bias, running_mean, running_var, training, momentum, eps);
  QAT_PROFILE("batch_norm.forward");
  const Setup su = setup(x, weight, bias, running_mean, running_var, training);
  return batch_norm_cpu(su, x, s, weight, bias, running_mean, running_var, training, momentum, eps);
}

}  // namespace qat
