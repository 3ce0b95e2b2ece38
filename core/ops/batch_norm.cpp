#include "core/ops/batch_norm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/collective.h"
#include "core/ops/common.h"
#include "core/ops/math.h"
#include "core/ops/relu.h"
#include "core/ops/scale_channels.h"
#include "core/ops/scale_channels_math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

namespace {

// A channel's sums in kLanes interleaved double partial sums (element i of
// a plane goes to lane i mod kLanes), added in order at the end. One
// running sum is a chain of dependent adds, 4 cycles an element. 8 lanes
// (two 4-double vectors) left the sums of large planes bound by that
// latency, at half an element a cycle, a fraction of the memory's speed;
// 32 lanes are eight independent chains. A plane of fewer than 32 values
// would run all of them in the scalar tail, so small planes keep 8 lanes
// (with_lanes). The order is a fixed function of the shape, so the sums
// are the same on every run.
template <int kLanes>
struct DoubleLanes {
  double v[kLanes] = {};
  template <class Term>
  void add_terms(int64_t n, Term term) {
    double w[kLanes];  // locals: kept in registers
    for (int j = 0; j < kLanes; ++j) w[j] = v[j];
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) w[j] += term(i + j);
    for (int j = 0; i < n; ++i, ++j) w[j] += term(i);
    for (int j = 0; j < kLanes; ++j) v[j] = w[j];
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

// f(an empty DoubleLanes) with the lane count for planes of hw values.
template <class F>
auto with_lanes(int64_t hw, F f) {
  if (hw >= 128) return f(DoubleLanes<32>{});
  return f(DoubleLanes<8>{});
}

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
    if (!s) return raw(n, c);
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(L.hw));
    return plane_into(n, c, buf.data());
  }
  // The same plane made in dst (x's own plane where there is no s).
  const float* plane_into(int64_t n, int64_t c, float* __restrict dst) const {
    const float* __restrict p = raw(n, c);
    if (!s) return p;
    const float sc = s[c];
    for (int64_t i = 0; i < L.hw; ++i) dst[i] = p[i] * sc;
    return dst;
  }
};

// The activation fused after the batch norm (BnActivation), with
// core/ops/math.h's rules as relu() and relu6() apply them: in place on
// an output plane just written (still in cache), so every value is the
// one those ops would read and write.
void activate_plane(BnActivation act, float* y, int64_t n) {
  if (act == BnActivation::relu)
    for (int64_t i = 0; i < n; ++i) y[i] = op_math::relu_value(y[i]);
  else if (act == BnActivation::relu6)
    for (int64_t i = 0; i < n; ++i) y[i] = op_math::relu6_value(y[i]);
}

// With an output stage, the byte kept for the backward of each element:
// bit 1 the activation passes, bit 0 the stage passes.
constexpr uint8_t kActivationPasses = 2;

// m[i] |= kActivationPasses where the activation's gradient passes at its
// output y[i] (the rules of relu_grad / relu6_grad). A loop per activation,
// on restrict pointers: a byte store may alias anything, and GCC otherwise
// reloads act and n every element and does not vectorise.
void mark_activation_passes(BnActivation act, const float* __restrict y, uint8_t* __restrict m, int64_t n) {
  if (act == BnActivation::relu)
    for (int64_t i = 0; i < n; ++i) m[i] |= op_math::relu_grad(y[i], 1.f) != 0.f ? kActivationPasses : 0;
  else if (act == BnActivation::relu6)
    for (int64_t i = 0; i < n; ++i) m[i] |= op_math::relu6_grad(y[i], 1.f) != 0.f ? kActivationPasses : 0;
  else
    for (int64_t i = 0; i < n; ++i) m[i] |= kActivationPasses;
}

// The gradient that reaches the batch norm's output: g itself; after an
// activation, the activation's backward of g read from the saved output
// y; after a stage, both backwards from the saved mask bytes: 0 where the
// activation stops it, else g times the stage's 0 or 1 (the product of the
// clipped STE, then the activation's select: the same bits as the ops).
struct GradIn {
  const float* g;
  const float* y;       // null: no activation, or a stage
  const uint8_t* mask;  // a stage's (kActivationPasses, stage's pass)
  BnActivation act;
  Layout L;
  // plane (n, c) of the gradient: g's own, or the masked gradient made in
  // plane n of channel_buf (a channel's N planes)
  const float* plane(int64_t n, int64_t c, float* channel_buf) const {
    const int64_t o = (n * L.c + c) * L.hw;
    if (!y && !mask) return g + o;
    float* __restrict buf = channel_buf + n * L.hw;
    const float* pg = g + o;
    if (mask) {
      // The select as a bit mask (all ones or +0.0f): GCC keeps a select
      // guarding a product as a branch, one element at a time.
      const uint8_t* __restrict pm = mask + o;
      for (int64_t i = 0; i < L.hw; ++i) {
        const float through = pg[i] * static_cast<float>(pm[i] & 1);
        const uint32_t keep = 0u - static_cast<uint32_t>((pm[i] & kActivationPasses) != 0);
        buf[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(through) & keep);
      }
      return buf;
    }
    const float* py = y + o;
    if (act == BnActivation::relu)
      for (int64_t i = 0; i < L.hw; ++i) buf[i] = op_math::relu_grad(py[i], pg[i]);
    else
      for (int64_t i = 0; i < L.hw; ++i) buf[i] = op_math::relu6_grad(py[i], pg[i]);
    return buf;
  }
  bool masks() const { return y || mask; }
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

// A channel's sum of x (mu null) or of its squared deviations from *mu,
// in double over its planes in image order.
template <class Lanes>
double channel_sum(const Input& in, int64_t c, const double* mu, Lanes& acc) {
  const Layout& L = in.L;
  for (int64_t n = 0; n < L.n; ++n) {
    const float* p = in.raw(n, c);
    if (in.s) {  // x * s in float, then in double: no product to fuse, so no plane to make
      const float sc = in.s[c];
      if (!mu) {
        acc.add_terms(L.hw, [p, sc](int64_t i) { return static_cast<double>(p[i] * sc); });
      } else {
        const double m = *mu;
        acc.add_terms(L.hw, [p, sc, m](int64_t i) {
          const double d = static_cast<double>(p[i] * sc) - m;
          return d * d;
        });
      }
    } else if (!mu) {
      acc.add(p, L.hw);
    } else {
      acc.add_squared_deviations(p, L.hw, *mu);
    }
  }
  return acc.total();
}

double channel_sum(const Input& in, int64_t c, const double* mu) {
  return with_lanes(in.L.hw, [&](auto acc) { return channel_sum(in, c, mu, acc); });
}

// Note [one channel at a time]: batch norm reads each channel several
// times (its sum, its squared deviations, the output; backward: two sums,
// then the input gradient). Unsynchronised, nothing between the passes
// needs the other channels, so each thread runs every pass of a channel
// before the next one: the channel's N planes (128 KB a tensor for
// MobileNetV2 at 32 px, batch 32) are read from memory once and from the
// cache after. The arithmetic and its order are those of the pass-by-pass
// loops that synchronised batch norm keeps (the global sums come between
// its passes), so both give the same bits.

// The forward's per-channel state: the batch statistics' sums (turned into
// mean and squared deviations in place), then the normalisation.
struct Forward {
  const Input& in;
  const float *pw, *pb;
  float *rm, *rv;
  float* po;
  bool use_batch_stats, training;
  float momentum, eps;
  double count;
  BnActivation act;
  std::vector<double>& sum;  // sums, then means
  std::vector<double>& sq;
  std::vector<float>& mean;
  std::vector<float>& istd;
  BnOutputStage* stage;
  uint8_t* mask;                        // a stage's, where a gradient is wanted (GradIn)
  std::vector<float> scale_c, shift_c;  // per channel: y = x * scale + shift

  // Channel c's statistics, running statistics and affine map.
  void prepare(int64_t c) {
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
    scale_c[c] = istd[c] * (pw ? pw[c] : 1.f);
    shift_c[c] = (pb ? pb[c] : 0.f) - mu * scale_c[c];
  }

  // Channel c's output planes (through the stage, where there is one).
  void write(int64_t c) {
    const Layout& L = in.L;
    const float scale = scale_c[c], shift = shift_c[c];
    thread_local std::vector<float> staged;  // the channel's planes before the stage, one after another
    if (stage) staged.resize(static_cast<size_t>(L.n * L.hw));
    for (int64_t n = 0; n < L.n; ++n) {
      const float* p = in.raw(n, c);
      float* q = stage ? staged.data() + n * L.hw : po + (n * L.c + c) * L.hw;
      if (in.s) {  // (x * s) * scale + shift: the product rounded as the plane held it, then the same expression
        const float sc = in.s[c];
        for (int64_t i = 0; i < L.hw; ++i) q[i] = (p[i] * sc) * scale + shift;
      } else {
        for (int64_t i = 0; i < L.hw; ++i) q[i] = p[i] * scale + shift;
      }
      activate_plane(act, q, L.hw);
    }
    if (stage) run_stage(c, staged.data());
  }

  // The stage on channel c's planes (staged: its values after the
  // activation, plane after plane), into the output and the mask. Small
  // planes (16 values at 4x4) run as one contiguous run into buffers, then
  // are copied into place: a loop of 16 values is all scalar tail.
  void run_stage(int64_t c, const float* staged) const {
    const Layout& L = in.L;
    const int64_t first = c * L.hw, stride = L.c * L.hw, all = L.n * L.hw;
    if (L.hw >= 64) {
      stage->apply(staged, po + first, mask ? mask + first : nullptr, L.n, L.hw, stride);
      if (mask)
        for (int64_t n = 0; n < L.n; ++n)
          mark_activation_passes(act, staged + n * L.hw, mask + first + n * stride, L.hw);
      return;
    }
    thread_local std::vector<float> out_buf;
    thread_local std::vector<uint8_t> mask_buf;
    out_buf.resize(static_cast<size_t>(all));
    mask_buf.resize(mask ? static_cast<size_t>(all) : 0);
    stage->apply(staged, out_buf.data(), mask ? mask_buf.data() : nullptr, 1, all, all);
    if (mask) mark_activation_passes(act, staged, mask_buf.data(), all);
    for (int64_t n = 0; n < L.n; ++n) {
      std::memcpy(po + first + n * stride, out_buf.data() + n * L.hw, static_cast<size_t>(L.hw) * sizeof(float));
      if (mask) std::memcpy(mask + first + n * stride, mask_buf.data() + n * L.hw, static_cast<size_t>(L.hw));
    }
  }

  // One value of channel c after the activation, from input value p, by
  // write()'s expression (for the output's range: each step is monotonic in
  // p, so a channel's extremes come from its input's).
  float value(int64_t c, float p) const {
    float v = in.s ? (p * in.s[c]) * scale_c[c] + shift_c[c] : p * scale_c[c] + shift_c[c];
    activate_plane(act, &v, 1);
    return v;
  }

  // The range of channel c's output values, NaNs left out (+inf, -inf: none).
  void channel_range(int64_t c, float& lo, float& hi) const {
    const Layout& L = in.L;
    // 16 lanes in a GCC vector (a running min is a chain; GCC vectorises
    // neither it nor an array of lanes), the tail one lane at a time. The
    // select keeps the lane where the value is NaN (compares false).
    using Lanes = float __attribute__((vector_size(64)));
    constexpr float kInf = std::numeric_limits<float>::infinity();
    Lanes vmn = Lanes{} + kInf, vmx = Lanes{} - kInf;
    for (int64_t n = 0; n < L.n; ++n) {
      const float* p = in.raw(n, c);
      int64_t i = 0;
      for (; i + 16 <= L.hw; i += 16) {
        Lanes v;
        std::memcpy(&v, p + i, sizeof v);
        vmn = v < vmn ? v : vmn;
        vmx = v > vmx ? v : vmx;
      }
      for (int j = 0; i < L.hw; ++i, ++j) {
        vmn[j] = p[i] < vmn[j] ? p[i] : vmn[j];
        vmx[j] = p[i] > vmx[j] ? p[i] : vmx[j];
      }
    }
    float mn = kInf, mx = -kInf;
    for (int j = 0; j < 16; ++j) mn = vmn[j] < mn ? vmn[j] : mn, mx = vmx[j] > mx ? vmx[j] : mx;
    lo = kInf, hi = -kInf;
    if (mn > mx) return;
    for (const float v : {value(c, mn), value(c, mx)}) {
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  }

  void stats(int64_t c) {
    if (!use_batch_stats) return;
    sum[c] = channel_sum(in, c, nullptr) / count;
    sq[c] = channel_sum(in, c, &sum[c]);
  }

  // Every pass of channel c (Note [one channel at a time]).
  void whole_channel(int64_t c) {
    stats(c);
    prepare(c);
    write(c);
  }

  // Unsynchronised. A stage that wants the output's range gets it before
  // any plane is written: every channel's statistics and range first, then
  // the planes.
  void run_unsynchronised() {
    const int64_t C = in.L.c;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    if (!stage || !stage->wants_range()) {
      if (stage) stage->begin(kInf, -kInf);
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < C; ++c) whole_channel(c);
      return;
    }
    std::vector<float> lo(C), hi(C);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      stats(c);
      prepare(c);
      channel_range(c, lo[c], hi[c]);
    }
    float a = kInf, b = -kInf;
    for (int64_t c = 0; c < C; ++c) a = std::min(a, lo[c]), b = std::max(b, hi[c]);
    stage->begin(a, b);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c) write(c);
  }

  // Synchronised: pass by pass, each sum over all processes between them.
  void pass_by_pass(Collective* coll) {
    const int64_t C = in.L.c;
    if (use_batch_stats) {
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < C; ++c) sum[c] = channel_sum(in, c, nullptr);
      coll->sum(sum.data(), C);
      coll->sum(&count, 1);
      QAT_CHECK(count > 1, "batch_norm: training needs more than one value per channel in the global batch");
      for (int64_t c = 0; c < C; ++c) sum[c] /= count;
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < C; ++c) sq[c] = channel_sum(in, c, &sum[c]);
      coll->sum(sq.data(), C);
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      prepare(c);
      write(c);
    }
  }
};

// The backward (gradient slots: x, [s,] weight, bias), per channel: the
// sums of g and of g (x - mean), then the input gradient from them.
struct Backward {
  const Input& in;
  const GradIn& gin;
  const float* pw;
  const std::vector<float>& mean;
  const std::vector<float>& istd;
  bool use_batch_stats;
  double count;
  float* pdx;    // null: x needs no gradient
  float* pds;    // null: s needs no gradient (or there is none)
  float *pdw, *pdb;

  // The two sums of channel c; the masked gradient planes (GradIn) left in
  // gbuf and the scaled input's planes (x s) in pbuf (N planes each, where
  // there are such planes; pbuf null: none kept) for input_grad to read.
  std::pair<double, double> sums(int64_t c, float* gbuf, float* pbuf) const {
    return with_lanes(in.L.hw, [&](auto sg) { return sums(c, gbuf, pbuf, sg, decltype(sg){}); });
  }
  template <class Lanes>
  std::pair<double, double> sums(int64_t c, float* gbuf, float* pbuf, Lanes sg, Lanes sgx) const {
    const Layout& L = in.L;
    for (int64_t n = 0; n < L.n; ++n) {
      const float* p = pbuf ? in.plane_into(n, c, pbuf + n * L.hw) : in.plane(n, c);
      const float* q = gin.plane(n, c, gbuf);
      sg.add(q, L.hw);
      sgx.add_products_with_deviations(q, p, L.hw, mean[c]);
    }
    return {sg.total(), sgx.total()};
  }

  // Note [the scaled input gradient in one pass]: batch_norm_scaled's
  // d = k (q - a - (p - mean) b) on the plane p = x s, then scale_channels'
  // backward from it, dx = d s and the plane's dot_lanes(d, x), in one loop:
  // each value is the separate passes' (the same float operations; the
  // dot's sixteen partial sums in dot_lanes's order), without d's plane
  // written and read back twice. p stays a plane in memory: made inside the
  // loop, its product could be fused into the subtraction (-ffp-contract),
  // another rounding than the two ops'.
  float scaled_plane_grad(const float* __restrict q, const float* __restrict p, const float* __restrict x, float sc,
                          float mu, float k, float a, float b, float* __restrict out_dx) const {
    const int64_t n = in.L.hw;
    float part[16] = {};
    auto one = [&](int64_t i, int j) {
      const float d = use_batch_stats ? k * (q[i] - a - (p[i] - mu) * b) : k * q[i];
      if (out_dx) out_dx[i] = d * sc;
      part[j] = op_math::mul_add(d, x[i], part[j]);
    };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int j = 0; j < 16; ++j) one(i + j, j);
    for (int j = 0; i < n; ++i, ++j) one(i, j);
    float dot = 0.f;
    for (int j = 0; j < 16; ++j) dot += part[j];
    return dot;
  }

  // weight and bias: this process's part (the training loop sums the
  // parameter gradients of all processes)
  void param_grads(int64_t c, std::pair<double, double> s) const {
    if (pdw) pdw[c] = static_cast<float>(s.second) * istd[c];
    if (pdb) pdb[c] = static_cast<float>(s.first);
  }

  // x's (and s's) gradient of channel c from the (global) sums. fresh:
  // gbuf and pbuf hold the planes sums() made.
  void input_grad(int64_t c, std::pair<double, double> s, float* gbuf, const float* pbuf, bool fresh) const {
    if (!pdx && !pds) return;
    const Layout& L = in.L;
    const float inv_m = 1.f / static_cast<float>(count);
    const float sum_g = static_cast<float>(s.first);
    const float sum_gxhat = static_cast<float>(s.second) * istd[c];
    const float k = (pw ? pw[c] : 1.f) * istd[c];
    // scaled: the gradient d of x * s, then scale_channels' backward
    // from it (dx = d s; ds = its per-image dot products with x, in
    // double in image order: op_math::scale_channel_grad).
    const float a = sum_g * inv_m, b = sum_gxhat * inv_m * istd[c];
    double ds = 0;
    for (int64_t n = 0; n < L.n; ++n) {
      const float* q = fresh && gin.masks() ? gbuf + n * L.hw : gin.plane(n, c, gbuf);
      float* out_dx = pdx ? pdx + (n * L.c + c) * L.hw : nullptr;
      if (in.s) {
        const float* p = !use_batch_stats ? in.raw(n, c) : fresh ? pbuf + n * L.hw : in.plane(n, c);
        ds += scaled_plane_grad(q, p, in.raw(n, c), in.s[c], mean[c], k, a, b, out_dx);
        continue;
      }
      float* d = out_dx;
      if (use_batch_stats) {  // (the running statistics' gradient needs no input plane)
        const float* p = in.plane(n, c);
        for (int64_t i = 0; i < L.hw; ++i) d[i] = k * (q[i] - a - (p[i] - mean[c]) * b);
      } else {
        for (int64_t i = 0; i < L.hw; ++i) d[i] = k * q[i];
      }
    }
    if (pds) pds[c] = static_cast<float>(ds);
  }

  // The calling thread's buffers for a channel's masked gradient planes
  // (GradIn; empty where the gradient is g's own) and scaled input planes
  // (null where there is no scale).
  float* channel_buffer() const {
    thread_local std::vector<float> buf;
    buf.resize(gin.masks() ? static_cast<size_t>(in.L.n * in.L.hw) : 0);
    return buf.data();
  }
  float* scaled_buffer() const {
    if (!in.s) return nullptr;
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(in.L.n * in.L.hw));
    return buf.data();
  }

  void run(Collective* coll) const {
    const int64_t C = in.L.c;
    if (!coll) {  // Note [one channel at a time]
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < C; ++c) {
        float *gbuf = channel_buffer(), *pbuf = scaled_buffer();
        const auto s = sums(c, gbuf, pbuf);
        param_grads(c, s);
        input_grad(c, s, gbuf, pbuf, true);
      }
      return;
    }
    std::vector<std::pair<double, double>> s(C);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c) s[c] = sums(c, channel_buffer(), nullptr);  // (input_grad makes its planes again)
    for (int64_t c = 0; c < C; ++c) param_grads(c, s[c]);
    std::vector<double> flat(2 * C);  // dx: the global sums
    for (int64_t c = 0; c < C; ++c) flat[2 * c] = s[c].first, flat[2 * c + 1] = s[c].second;
    coll->sum(flat.data(), 2 * C);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c)
      input_grad(c, {flat[2 * c], flat[2 * c + 1]}, channel_buffer(), nullptr, false);
  }
};

// batch_norm of x, or of x * s[c] where s is defined (CPU), then act.
Tensor batch_norm_cpu(const Setup& setup, const Tensor& x, const Tensor& s, const Tensor& weight, const Tensor& bias,
                      const Tensor& running_mean, const Tensor& running_var, bool training, float momentum, float eps,
                      BnActivation act, BnOutputStage* stage) {
  const Layout L = setup.L;
  QAT_CHECK(!stage || !setup.coll, "batch_norm: an output stage runs in unsynchronised batch norm only");
  Tensor xc = x.contiguous(), sc = s.defined() ? s.contiguous() : Tensor();
  Tensor out = Tensor::empty(x.sizes());
  const bool grad = any_requires_grad({&x, &s, &weight, &bias});
  Tensor mask = stage && grad ? Tensor::empty(x.sizes(), DType::u8) : Tensor();
  const Input in{xc.data<float>(), sc.defined() ? sc.data<float>() : nullptr, L};
  std::vector<float> mean(L.c), istd(L.c);
  std::vector<double> sum(L.c, 0.0), sq(L.c, 0.0);
  Forward f{in,
            weight.defined() ? weight.data<float>() : nullptr,
            bias.defined() ? bias.data<float>() : nullptr,
            running_mean.defined() ? running_mean.data<float>() : nullptr,
            running_var.defined() ? running_var.data<float>() : nullptr,
            out.data<float>(),
            setup.use_batch_stats,
            training,
            momentum,
            eps,
            static_cast<double>(L.m()),
            act,
            sum,
            sq,
            mean,
            istd,
            stage,
            mask.defined() ? mask.data<uint8_t>() : nullptr,
            std::vector<float>(L.c),
            std::vector<float>(L.c)};
  if (setup.coll)
    f.pass_by_pass(setup.coll);
  else
    f.run_unsynchronised();
  if (training && f.rm) {
    running_mean.impl_ptr()->storage->version++;
    running_var.impl_ptr()->storage->version++;
  }

  const bool scaled = in.s != nullptr;
  // the activation's gradient reads the output; a stage's, the mask
  const Tensor kept_out = act == BnActivation::none || stage ? Tensor() : out;
  auto backward = [sx = Saved(xc), ss = Saved(sc), sw = Saved(weight), sy = Saved(kept_out), mask, act, mean, istd, L,
                   use_batch_stats = setup.use_batch_stats, coll = setup.coll, count = f.count,
                   scaled](const Tensor& g, const NeedGrad& need) {
    QAT_PROFILE("batch_norm.backward");
    const Tensor& xv = sx.get("batch_norm");
    const Tensor& wv = sw.get("batch_norm");
    Tensor gc = g.contiguous();
    const Input in{xv.data<float>(), scaled ? ss.get("batch_norm").data<float>() : nullptr, L};
    const GradIn gin{gc.data<float>(), sy.defined() ? sy.get("batch_norm").data<float>() : nullptr,
                     mask.defined() ? mask.data<uint8_t>() : nullptr, act, L};
    const int ix = 0, is = scaled ? 1 : -1, iw = scaled ? 2 : 1, ib = iw + 1;
    TensorList r(scaled ? 4 : 3);
    auto slot = [&](int i, const Shape& shape) -> float* {
      if (i < 0 || !need[i]) return nullptr;
      r[i] = Tensor::empty(shape);
      return r[i].data<float>();
    };
    const Backward b{in,
                     gin,
                     wv.defined() ? wv.data<float>() : nullptr,
                     mean,
                     istd,
                     use_batch_stats,
                     count,
                     slot(ix, xv.sizes()),
                     slot(is, {L.c}),
                     slot(iw, {L.c}),
                     slot(ib, {L.c})};
    b.run(coll);
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
  return batch_norm_cpu(su, x, Tensor(), weight, bias, running_mean, running_var, training, momentum, eps,
                        BnActivation::none, nullptr);
}

Tensor batch_norm_scaled(const Tensor& x, const Tensor& s, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, bool training, float momentum,
                         float eps, BnActivation act, BnOutputStage* stage) {
  detail::check_f32_any_device(s, "batch_norm_scaled", "scale");
  detail::check_f32_any_device(x, "batch_norm_scaled", "input");
  QAT_CHECK(x.dim() >= 2 && s.dim() == 1 && s.size(0) == x.size(1), "batch_norm_scaled: expected scale (",
            x.size(1), ") for input ", x.sizes(), ", got ", s.sizes());
  detail::check_same_device("batch_norm_scaled", {{"input", &x}, {"scale", &s}});
  QAT_CHECK(!stage || x.device() == Device::cpu, "batch_norm_scaled: an output stage runs on the CPU only");
  if (x.device() == Device::cuda) {  // the two (three) ops: the same result by definition
    Tensor y = batch_norm(scale_channels(x, s, 1), weight, bias, running_mean, running_var, training, momentum, eps);
    return act == BnActivation::relu ? relu(y) : act == BnActivation::relu6 ? relu6(y) : y;
  }
  QAT_PROFILE("batch_norm.forward");
  const Setup su = setup(x, weight, bias, running_mean, running_var, training);
  return batch_norm_cpu(su, x, s, weight, bias, running_mean, running_var, training, momentum, eps, act, stage);
}

}  // namespace qat
