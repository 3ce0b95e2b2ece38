// LSQ / LSQ+ learned quantizers (quant/sim/lsq.h).
//  - golden: tests/golden/gen_lsq.py -> tests/golden/lsq.safetensors holds, per
//    case, a float64 autograd reference written from the papers' formulas
//    ("ref.*", matched by LsqClip::paper) and, where the case maps onto it,
//    PyTorch 1.13's torch._fake_quantize_learnable_per_{tensor,channel}_affine
//    ("pt.*", matched by LsqClip::rounded); forward and the gradients of x,
//    the step and the offset / zero point.
//  - finite differences (tests/test_util.h gradcheck) of a smooth surrogate
//    (see "gradcheck: ..." below) and of the op itself where it is smooth.
//  - exact integer ranges, grad_scale, positivity of the step under
//    adversarial updates, init helpers, the parallel/vectorised paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "optim/sgd.h"
#include "quant/sim/lsq.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

// ---------------------------------------------------------------- golden file
const SafetensorsFile& golden() { return qat::testing::golden_file("lsq.safetensors"); }

std::vector<std::string> golden_cases() { return qat::testing::golden_case_names(golden(), "", ".spec"); }

struct GCase : qat::testing::GoldenCase {
  explicit GCase(std::string n) : GoldenCase(golden(), std::move(n)) {}
  std::vector<float> vec(const std::string& k) const { return get(k).to_vector(); }
  QuantSpec spec() const {
    const Tensor t = get("spec");
    const int32_t* p = t.data<int32_t>();
    QuantSpec s;
    s.bits = p[0], s.is_signed = p[1] != 0, s.narrow_range = p[2] != 0, s.per_channel = p[3] != 0, s.axis = p[4];
    s.symmetric = !has("offset");
    INFO(name << ": " << s.describe());
    REQUIRE(s.qmin() == p[5]);  // the range PyTorch and the reference were given
    REQUIRE(s.qmax() == p[6]);
    return s;
  }
};

// Elementwise |a - e| <= atol + rtol |e|; reports the count and the worst element.
void expect_close(const std::string& where, const Tensor& actual, const std::vector<double>& expected, double atol,
                  double rtol) {
  INFO(where);
  REQUIRE(actual.defined());
  const std::vector<float> a = actual.to_vector();
  REQUIRE(a.size() == expected.size());
  int64_t bad = 0, worst = -1;
  double worst_excess = -1e300;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(a[i] - expected[i]);
    const double excess = std::isnan(err) ? 1e300 : err - (atol + rtol * std::fabs(expected[i]));
    if (excess > 0) ++bad;
    if (excess > worst_excess) worst_excess = excess, worst = static_cast<int64_t>(i);
  }
  std::ostringstream os;
  os << where << ": " << bad << "/" << a.size() << " out of tolerance (abs " << atol << " + rel " << rtol << ")";
  if (worst >= 0) os << "; worst [" << worst << "]: ours " << a[worst] << ", expected " << expected[worst];
  INFO(os.str());
  CHECK(bad == 0);
}

void expect_close(const std::string& where, const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  const std::vector<float> e = expected.to_vector();
  expect_close(where, actual, std::vector<double>(e.begin(), e.end()), atol, rtol);
}

// Tolerance for a summed step/offset gradient: a small fraction of the
// largest possible magnitude gf * Σ|gy| * max(Q_N, Q_P) (float32 sums, in
// PyTorch and in qat, in different orders). One element classified
// differently would move the sum by about gf * |gy| >> this.
double sum_atol(const GCase& c, const QuantSpec& spec) {
  double s = 0;
  for (float g : c.vec("gy")) s += std::fabs(g);
  const double q = std::max(std::abs(spec.qmin()), spec.qmax());
  return 2e-6 * c.vec("gf")[0] * s * q;
}

Tensor run_op(const Tensor& x, const Tensor& step, const Tensor& offset, const QuantSpec& spec, float gf,
              LsqClip clip) {
  return offset.defined() ? lsq_plus_quantize(x, step, offset, spec, gf, clip) : lsq_quantize(x, step, spec, gf, clip);
}

// ---------------------------------------------------------------- helpers
// Shape that broadcasts a (C) parameter against v along the spec's axis.
Shape param_view_shape(const Tensor& v, const QuantSpec& spec) {
  Shape s(v.dim(), 1);
  if (spec.per_channel) s[spec.axis] = v.size(spec.axis);
  return s;
}

// Channel of each element of a contiguous tensor (0 for per-tensor).
std::vector<int64_t> channel_of(const Shape& shape, const QuantSpec& spec) {
  const int64_t n = shape_numel(shape);
  std::vector<int64_t> ch(n, 0);
  if (!spec.per_channel) return ch;
  int64_t inner = 1;
  for (size_t d = spec.axis + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int64_t i = 0; i < n; ++i) ch[i] = (i / inner) % shape[spec.axis];
  return ch;
}

// Inputs for finite differences: every element either inside the range with
// t = (v - β)/s in [qmin + 0.1, qmax - 0.1], or clipped with t at least 1.5
// beyond an end; half of each. (Inside values are never in the half-step
// bands where the two LsqClip conventions differ.)
Tensor fd_input(const Shape& shape, const QuantSpec& spec, const std::vector<float>& s, const std::vector<float>& beta,
                uint64_t seed) {
  Generator g(seed);
  const auto ch = channel_of(shape, spec);
  const float lo = static_cast<float>(spec.qmin()), hi = static_cast<float>(spec.qmax());
  std::vector<float> v(ch.size());
  for (size_t i = 0; i < v.size(); ++i) {
    float t;
    const float u = g.uniform();
    if (u < 0.5f)
      t = g.uniform(lo + 0.1f, hi - 0.1f);
    else if (u < 0.75f)
      t = lo - g.uniform(1.5f, 6.f);
    else
      t = hi + g.uniform(1.5f, 6.f);
    v[i] = t * s[ch[i]] + (beta.empty() ? 0.f : beta[ch[i]]);
  }
  Tensor x = Tensor::from_vector(v, shape);
  x.set_requires_grad(true);
  return x;
}

Tensor param(const std::vector<float>& v) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  t.set_requires_grad(true);
  return t;
}

// The smooth surrogate of an LSQ(+) quantizer whose gradient is the STE's:
//   F(v, p, β) = lsq(v, p, β) + s * stopgrad(clamp(t) - round(clamp(t))),  t = (v - β)/s, s = |p|
// Its value is s*clamp(t) + β (the rounding cancels), piecewise linear with
// kinks only at the range ends, so central differences are exact away from
// them. Its autograd gradient is the op's backward plus the stop-gradient
// term's coefficient: inside the range, dF/ds = (round(t) - t) + (t - round(t))
// = 0 = d(v)/ds, dF/dv = 1, dF/dβ = 0; clipped, dF/ds = ±Q, dF/dv = 0,
// dF/dβ = 1. A wrong mask, a missing -t, a wrong sign of p or a wrong
// reduction all show up as a mismatch.
Tensor surrogate(const std::vector<Tensor>& in, const QuantSpec& spec, LsqClip clip) {
  const Tensor& v = in[0];
  const Tensor& p = in[1];
  const bool plus = in.size() > 2;
  Tensor y = plus ? lsq_plus_quantize(v, p, in[2], spec, 1.f, clip) : lsq_quantize(v, p, spec, 1.f, clip);
  const auto ch = channel_of(v.sizes(), spec);
  const std::vector<float> pv = p.to_vector(), xv = v.to_vector();
  const std::vector<float> bv = plus ? in[2].to_vector() : std::vector<float>(pv.size(), 0.f);
  const float lo = static_cast<float>(spec.qmin()), hi = static_cast<float>(spec.qmax());
  std::vector<float> k(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t c = ch[i];
    const float s = std::max(std::fabs(pv[c]), lsq_min_step(spec));
    const float t = std::clamp((xv[i] - bv[c]) * (1.f / s), lo, hi);
    // s * K, written as p * (sign(p) K) so that autograd sees d/dp = sign(p) K
    k[i] = (t - std::nearbyint(t)) * (pv[c] < 0.f ? -1.f : 1.f);
  }
  return add(y, mul(reshape(p, param_view_shape(v, spec)), Tensor::from_vector(k, v.sizes())));
}

QuantSpec make_spec(int bits, bool is_signed, bool per_channel = false, int64_t axis = 0, bool narrow = false) {
  QuantSpec s;
  s.bits = bits, s.is_signed = is_signed, s.per_channel = per_channel, s.axis = axis, s.narrow_range = narrow;
  return s;
}

bool all_finite(const Tensor& t) {
  for (float x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

// ======================================================================== golden
TEST_CASE("lsq golden: paper formulas (float64 autograd reference), forward and x/step/offset gradients",
          "[quant][lsq][golden]") {
  const auto names = golden_cases();
  REQUIRE(names.size() >= 20);
  for (const std::string& name : names) {
    const GCase c{name};
    const QuantSpec spec = c.spec();
    Tensor x = c.leaf("x"), step = c.leaf("step");
    Tensor offset = c.has("offset") ? c.leaf("offset") : Tensor();
    const float gf = c.vec("gf")[0];
    Tensor y = run_op(x, step, offset, spec, gf, LsqClip::paper);
    expect_close(name + " paper y", y, c.get("ref.y"), 1e-6, 1e-6);
    y.backward(c.get("gy"));
    expect_close(name + " paper dx", x.grad(), c.get("ref.dx"), 0, 0);
    expect_close(name + " paper dstep", step.grad(), c.get("ref.dstep"), sum_atol(c, spec), 1e-6);
    if (offset.defined())
      expect_close(name + " paper doffset", offset.grad(), c.get("ref.doffset"), sum_atol(c, spec), 1e-6);
  }
}

// PyTorch's gradients are for (s, z) with x̂ = (clamp(round(x/s + z)) - z) s; ours
// for (s, β) with x̂ = round(clamp((x - β)/s)) s + β. The two are the same
// function for β = -z s (integer z), so by the chain rule through β(s, z) = -z s:
//   dL/dz|s = dL/dβ * dβ/dz = -s dL/dβ          ⇒ dβ = -dz / s
//   dL/ds|z = dL/ds|β + dL/dβ * dβ/ds = ds|β - z dβ  ⇒ ds|β = ds|z + z dβ = ds|z - z dz / s
// (grad_factor scales both in PyTorch, grad_scale both in qat.) An LSQ case
// (z = 0) also runs through lsq_plus_quantize with β = 0 to check dβ = -dz/s.
TEST_CASE("lsq golden: LsqClip::rounded matches torch._fake_quantize_learnable_per_{tensor,channel}_affine",
          "[quant][lsq][golden]") {
  int pt_cases = 0;
  for (const std::string& name : golden_cases()) {
    const GCase c{name};
    if (!c.has("pt.y")) continue;
    ++pt_cases;
    const QuantSpec spec = c.spec();
    const float gf = c.vec("gf")[0];
    const std::vector<float> s = c.vec("step"), z = c.vec("pt.zero_point"), dsc = c.vec("pt.dscale"),
                             dz = c.vec("pt.dzero_point");
    std::vector<double> want_dstep(s.size()), want_doffset(s.size());
    for (size_t j = 0; j < s.size(); ++j) {
      want_doffset[j] = -static_cast<double>(dz[j]) / s[j];
      want_dstep[j] = dsc[j] + static_cast<double>(z[j]) * want_doffset[j];
    }
    const double atol = sum_atol(c, spec);
    for (const bool via_plus : {false, true}) {
      if (!via_plus && c.has("offset")) continue;  // LSQ+ case: no plain-LSQ equivalent
      Tensor x = c.leaf("x"), step = c.leaf("step");
      Tensor offset;
      if (c.has("offset"))
        offset = c.leaf("offset");
      else if (via_plus)
        offset = Tensor::zeros(step.sizes()).set_requires_grad(true);
      Tensor y = run_op(x, step, offset, spec, gf, LsqClip::rounded);
      const std::string tag = name + (via_plus ? " (lsq_plus)" : "") + " vs torch ";
      expect_close(tag + "y", y, c.get("pt.y"), 1e-6, 1e-6);
      y.backward(c.get("gy"));
      expect_close(tag + "dx", x.grad(), c.get("pt.dx"), 0, 0);
      expect_close(tag + "dstep", step.grad(), want_dstep, atol, 1e-6);
      if (offset.defined()) expect_close(tag + "doffset", offset.grad(), want_doffset, atol, 1e-6);
    }
  }
  CHECK(pt_cases >= 15);
}

TEST_CASE("lsq golden: the two clip conventions differ only in the half-step bands at the range ends",
          "[quant][lsq][golden]") {
  for (const std::string& name : golden_cases()) {
    const GCase c{name};
    const QuantSpec spec = c.spec();
    const float gf = c.vec("gf")[0];
    Tensor offset = c.has("offset") ? c.get("offset") : Tensor();
    Tensor xp = c.leaf("x"), xr = c.leaf("x");
    Tensor yp = run_op(xp, c.get("step"), offset, spec, gf, LsqClip::paper);
    Tensor yr = run_op(xr, c.get("step"), offset, spec, gf, LsqClip::rounded);
    expect_close(name + " forward paper == rounded", yp, yr, 0, 0);
    yp.backward(c.get("gy"));
    yr.backward(c.get("gy"));
    const auto ch = channel_of(xp.sizes(), spec);
    const std::vector<float> x = c.vec("x"), s = c.vec("step"), gp = xp.grad().to_vector(), gr = xr.grad().to_vector();
    const std::vector<float> b = offset.defined() ? offset.to_vector() : std::vector<float>(s.size(), 0.f);
    int in_band = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double t = (static_cast<double>(x[i]) - b[ch[i]]) / s[ch[i]];
      const bool band = (t >= spec.qmax() && t < spec.qmax() + 0.5) || (t <= spec.qmin() && t >= spec.qmin() - 0.5);
      in_band += band;
      if (!band) {
        INFO(name << " element " << i << " t=" << t);
        CHECK(gp[i] == gr[i]);
      }
    }
    if (name.find("ties") != std::string::npos) CHECK(in_band > 0);  // the grids do reach into the bands
  }
}

// ======================================================================== finite differences
TEST_CASE("lsq gradcheck: STE surrogate, per-tensor and per-channel, LSQ and LSQ+, both clip conventions",
          "[quant][lsq][gradcheck]") {
  struct FdCase {
    const char* name;
    QuantSpec spec;
    Shape shape;
    std::vector<float> p;     // raw step parameters (negative ones test the sign folding)
    std::vector<float> beta;  // empty: LSQ
  };
  const std::vector<FdCase> cases = {
      {"int4 per-tensor", make_spec(4, true), {3, 11}, {0.3f}, {}},
      {"int4 per-tensor, negative raw step", make_spec(4, true), {3, 11}, {-0.3f}, {}},
      {"uint4 per-tensor", make_spec(4, false), {40}, {0.21f}, {}},
      {"int8 per-tensor", make_spec(8, true), {30}, {1.7f}, {}},
      {"int2 per-tensor", make_spec(2, true), {24}, {0.8f}, {}},
      {"int4 narrow", make_spec(4, true, false, 0, true), {24}, {0.5f}, {}},
      {"int4 per-channel axis0", make_spec(4, true, true, 0), {3, 2, 5}, {0.3f, -0.45f, 0.6f}, {}},
      {"uint8 per-channel axis1", make_spec(8, false, true, 1), {2, 3, 4}, {1.1f, 0.9f, 1.3f}, {}},
      {"int4 per-channel last axis", make_spec(4, true, true, 1), {7, 3}, {0.4f, 0.5f, -0.35f}, {}},
      {"lsq+ uint4 per-tensor", make_spec(4, false), {40}, {0.25f}, {-0.6f}},
      {"lsq+ int2 per-tensor, negative raw step", make_spec(2, true), {30}, {-0.7f}, {0.3f}},
      {"lsq+ uint8 per-channel axis1", make_spec(8, false, true, 1), {2, 3, 5}, {1.2f, 0.8f, 1.0f}, {-0.3f, 0.5f, 2.f}},
      {"lsq+ int4 per-channel last axis", make_spec(4, true, true, 1), {9, 2}, {0.3f, 0.7f}, {0.2f, -0.9f}},
  };
  for (const LsqClip clip : {LsqClip::paper, LsqClip::rounded}) {
    for (const FdCase& fc : cases) {
      INFO(fc.name << (clip == LsqClip::paper ? " (paper)" : " (rounded)"));
      std::vector<float> s(fc.p.size());
      for (size_t j = 0; j < s.size(); ++j) s[j] = std::fabs(fc.p[j]);
      // One run per input, each with an eps that moves no element across a range end:
      //  v, offset: |Δt| = eps / s <= 0.05 (inside elements are >= 0.1 from an end);
      //  step: |Δt| = |t| eps / s <= 0.05 for every element (|t| <= Q + 6,
      //  Q = max(Q_N, Q_P)); inside F = v does not move with the step at all.
      const double smin = *std::min_element(s.begin(), s.end());
      const double q = std::max(std::abs(fc.spec.qmin()), fc.spec.qmax()) + 6.0;
      const QuantSpec spec = fc.spec;
      const size_t n_in = fc.beta.empty() ? 2 : 3;
      for (size_t wrt = 0; wrt < n_in; ++wrt) {
        INFO("d/d" << (wrt == 0 ? "v" : wrt == 1 ? "step" : "offset"));
        Tensor x = fd_input(fc.shape, fc.spec, s, fc.beta, 11);
        x.set_requires_grad(wrt == 0);
        Tensor p = param(fc.p).set_requires_grad(wrt == 1);
        std::vector<Tensor> in{x, p};
        if (n_in == 3) in = {x, p, param(fc.beta).set_requires_grad(wrt == 2)};
        testing::GradCheckOptions opt;
        opt.eps = wrt == 1 ? 0.05 * smin / q : 0.05 * smin;
        testing::gradcheck([&](const std::vector<Tensor>& t) { return surrogate(t, spec, clip); }, in, opt);
      }
    }
  }
}

// Where every element is clipped the op is smooth (v̂ = -Q_N s + β or Q_P s + β),
// and its STE gradients are the true derivatives: plain central differences.
TEST_CASE("lsq gradcheck: the op itself where it is smooth (all elements clipped)", "[quant][lsq][gradcheck]") {
  for (const bool plus : {false, true}) {
    const QuantSpec spec = make_spec(4, true, true, 0);
    const std::vector<float> p = {0.3f, 0.5f}, beta = {0.1f, -0.2f};
    Generator g(5);
    std::vector<float> v(2 * 9);
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t c = i / 9;
      const float t = (i % 2 ? 7.f : -8.f) + (i % 2 ? 1.f : -1.f) * g.uniform(1.5f, 10.f);
      v[i] = t * p[c] + (plus ? beta[c] : 0.f);
    }
    Tensor x = Tensor::from_vector(v, {2, 9}).set_requires_grad(true);
    std::vector<Tensor> in{x, param(p)};
    if (plus) in = {x, param(p), param(beta)};
    testing::GradCheckOptions opt;
    opt.eps = 1e-3;
    testing::gradcheck(
        [&](const std::vector<Tensor>& t) {
          return plus ? lsq_plus_quantize(t[0], t[1], t[2], spec, 1.f) : lsq_quantize(t[0], t[1], spec, 1.f);
        },
        in, opt);
  }
}

// Inside the range the forward is piecewise constant in v (true derivative 0)
// and its s-derivative is round(t), so FD cannot see the STE; pin the inside
// formulas against a hand computation instead.
TEST_CASE("lsq: inside-range gradients are the STE's: dv = g, ds = (round(t) - t) g, dβ = 0", "[quant][lsq]") {
  const QuantSpec spec = make_spec(4, true);
  const std::vector<float> t = {-7.3f, -2.5f, -0.2f, 0.5f, 1.5f, 2.5f, 3.7f, 6.6f};  // ties round to even
  const float s = 0.25f, beta = 0.125f;
  std::vector<float> v;
  for (float ti : t) v.push_back(ti * s + beta);
  Tensor x = Tensor::from_vector(v, {8}).set_requires_grad(true);
  Tensor p = param({s}), b = param({beta});
  Tensor y = lsq_plus_quantize(x, p, b, spec, 1.f);
  const std::vector<float> yv = y.to_vector();
  const float want_q[] = {-7, -2, 0, 0, 2, 2, 4, 7};
  double want_ds = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    CHECK(yv[i] == want_q[i] * s + beta);
    want_ds += (want_q[i] - t[i]) * (i + 1.0);
  }
  std::vector<float> gy(8);
  for (size_t i = 0; i < 8; ++i) gy[i] = static_cast<float>(i + 1);
  y.backward(Tensor::from_vector(gy, {8}));
  CHECK(x.grad().to_vector() == gy);
  CHECK(p.grad().item() == Approx(want_ds).epsilon(1e-6));
  CHECK(b.grad().item() == 0.f);
}

// ======================================================================== ranges, grad scale, positivity
TEST_CASE("lsq: integer ranges are exact ([-8,7], [0,15], narrow [-7,7], 8- and 2-bit)", "[quant][lsq]") {
  struct R {
    QuantSpec spec;
    int lo, hi;
  };
  for (const R& r : {R{make_spec(4, true), -8, 7}, R{make_spec(4, false), 0, 15},
                     R{make_spec(4, true, false, 0, true), -7, 7}, R{make_spec(8, true), -128, 127},
                     R{make_spec(8, false), 0, 255}, R{make_spec(2, true), -2, 1}, R{make_spec(2, false), 0, 3}}) {
    INFO(r.spec.describe());
    CHECK(r.spec.qmin() == r.lo);
    CHECK(r.spec.qmax() == r.hi);
    const float s = 0.5f;
    std::vector<float> v;
    for (int i = -2000; i <= 2000; ++i) v.push_back(i * 0.37f * s);  // t from -740 to 740 in steps of 0.37
    for (const bool plus : {false, true}) {
      Tensor y = plus ? lsq_plus_quantize(Tensor::from_vector(v, {static_cast<int64_t>(v.size())}),
                                          Tensor::from_vector({s}, {1}), Tensor::zeros({1}), r.spec, 1.f)
                      : lsq_quantize(Tensor::from_vector(v, {static_cast<int64_t>(v.size())}),
                                     Tensor::from_vector({s}, {1}), r.spec, 1.f);
      std::set<int> levels;
      for (float yi : y.to_vector()) {
        const float q = yi / s;
        REQUIRE(q == std::nearbyint(q));
        levels.insert(static_cast<int>(q));
      }
      CHECK(*levels.begin() == r.lo);
      CHECK(*levels.rbegin() == r.hi);
      CHECK(static_cast<int>(levels.size()) == r.hi - r.lo + 1);
    }
  }
}

TEST_CASE("lsq: grad_scale multiplies the step and offset gradients, not dx, lsq_grad_scale", "[quant][lsq]") {
  const QuantSpec spec = make_spec(4, false, true, 0);
  CHECK(lsq_grad_scale(100, spec) == Approx(1.0 / std::sqrt(100.0 * 15)).epsilon(1e-7));
  CHECK(lsq_grad_scale(64, make_spec(8, true)) == Approx(1.0 / std::sqrt(64.0 * 127)).epsilon(1e-7));
  CHECK_THROWS_AS(lsq_grad_scale(0, spec), Error);
  const std::vector<float> s = {0.2f, 0.3f};
  const std::vector<float> b = {-0.1f, 0.4f};
  Tensor x0 = fd_input({2, 50}, spec, s, b, 3);
  const Tensor gy = testing::rand_tensor({2, 50}, 9, false);
  auto grads = [&](float gs) {
    Tensor x = x0.detach().clone().set_requires_grad(true);
    Tensor p = param(s), o = param(b);
    lsq_plus_quantize(x, p, o, spec, gs).backward(gy);
    return std::vector<Tensor>{x.grad(), p.grad(), o.grad()};
  };
  const float g = lsq_grad_scale(50, spec);
  const auto one = grads(1.f), scaled = grads(g);
  CHECK(one[0].to_vector() == scaled[0].to_vector());
  testing::require_close(scaled[1], mul(one[1], g), 1e-7, 1e-6, "dstep scaled");
  testing::require_close(scaled[2], mul(one[2], g), 1e-7, 1e-6, "doffset scaled");
  CHECK(std::fabs(one[1].to_vector()[0]) > 1.f);  // non-trivial sums
  CHECK(std::fabs(one[2].to_vector()[1]) > 1.f);
}

TEST_CASE("lsq: the step stays positive by construction (|p| floored), sign of p folded into its gradient",
          "[quant][lsq][positivity]") {
  const QuantSpec spec = make_spec(4, true);
  const Tensor x = testing::rand_tensor({64}, 1, false);
  SECTION("negative raw parameter behaves as |p|; zero uses the floor, finite everywhere") {
    Tensor yp = lsq_quantize(x, Tensor::from_vector({0.2f}, {1}), spec, 1.f);
    Tensor yn = lsq_quantize(x, Tensor::from_vector({-0.2f}, {1}), spec, 1.f);
    CHECK(yp.to_vector() == yn.to_vector());
    Tensor p0 = param({0.f});
    Tensor xl = x.clone().set_requires_grad(true);
    Tensor y0 = lsq_quantize(xl, p0, spec, 1.f);
    CHECK(all_finite(y0));
    mul(y0, 3.f).backward(Tensor::ones({64}));
    CHECK(all_finite(xl.grad()));
    CHECK(all_finite(p0.grad()));
    CHECK(lsq_step_value(Tensor::from_vector({0.f, -3e-12f, -0.5f, 0.25f}, {4}), spec).to_vector() ==
          std::vector<float>{kLsqStepFloor, kLsqStepFloor, 0.5f, 0.25f});
    QuantSpec ms = spec;
    ms.min_scale = 1.f / 4096;
    CHECK(lsq_min_step(ms) == 1.f / 4096);
    CHECK(lsq_step_value(Tensor::from_vector({1e-9f}, {1}), ms).item() == 1.f / 4096);
    // in the normal regime the effective step is the parameter, bit for bit
    CHECK(lsq_step_value(Tensor::from_vector({0.0371f}, {1}), spec).item() == 0.0371f);
  }
  SECTION("SGD with a huge learning rate on a loss that wants s -> 0 never yields s <= 0 or NaN") {
    // every element clipped: L = Σ v̂² = Σ (Q s)², dL/ds = c s with c > 0, so
    // SGD maps p to (1 - lr c) p: lr c in (1, 2) overshoots zero and converges
    // onto the floor, lr c > 2 oscillates with a growing |p|; the parameter
    // crosses zero every step in both.
    const Tensor big = mul(testing::rand_tensor({256}, 2, false), 100.f);
    const float gs = lsq_grad_scale(256, spec);
    for (const bool plus : {false, true}) {
      for (const double lr : {2.5e-3, 1.0, 10.0}) {
        for (const double momentum : {0.0, 0.9}) {
          INFO((plus ? "lsq+" : "lsq") << " lr " << lr << " momentum " << momentum);
          Tensor p = param({0.5f}), o = param({0.f});
          std::vector<ParamGroup> groups{{"quant", plus ? std::vector<Tensor>{p, o} : std::vector<Tensor>{p}, lr, 0.0}};
          SGD opt(groups, SGDOptions{momentum});
          float min_s = 1e30f;
          int sign_changes = 0;
          for (int it = 0; it < 100; ++it) {
            opt.zero_grad();
            Tensor y = plus ? lsq_plus_quantize(big, p, o, spec, gs) : lsq_quantize(big, p, spec, gs);
            Tensor loss = sum(mul(y, y));
            REQUIRE(std::isfinite(loss.item()));
            loss.backward();
            REQUIRE(all_finite(p.grad()));
            const float before = p.item();
            opt.step();
            REQUIRE(std::isfinite(p.item()));
            sign_changes += (before < 0.f) != (p.item() < 0.f);
            const float s = lsq_step_value(p, spec).item();
            REQUIRE(s >= kLsqStepFloor);
            min_s = std::min(min_s, s);
          }
          CHECK(sign_changes > 0);  // the raw parameter did go negative
          if (lr == 2.5e-3 && momentum == 0.0) CHECK(min_s < 1e-3f);  // the step was driven (close) to zero
        }
      }
    }
  }
  SECTION("training a 2-bit quantized linear model with a large LR stays finite and learns") {
    const QuantSpec ws = make_spec(2, true, true, 0);
    Tensor w = testing::rand_tensor({4, 16}, 3);
    Tensor wt = testing::rand_tensor({4, 16}, 4, false);
    Tensor p = lsq_init_steps(w.detach(), ws).set_requires_grad(true);
    const float gs = lsq_grad_scale(16, ws);
    SGD opt({{"w", {w}, 0.05, 0.0}, {"quant", {p}, 0.5, 0.0}}, SGDOptions{0.9});
    float first = 0, last = 0;
    for (int it = 0; it < 150; ++it) {
      opt.zero_grad();
      const Tensor xb = testing::rand_tensor({32, 16}, 100 + it, false);
      Tensor out = linear(xb, lsq_quantize(w, p, ws, gs), Tensor());
      Tensor d = sub(out, linear(xb, wt, Tensor()));
      Tensor loss = mean(mul(d, d));
      REQUIRE(std::isfinite(loss.item()));
      if (it == 0) first = loss.item();
      last = loss.item();
      loss.backward();
      opt.step();
      REQUIRE(all_finite(p));
      for (float s : lsq_step_value(p, ws).to_vector()) REQUIRE(s > 0.f);
    }
    CHECK(last < first);
  }
}

// ======================================================================== init
TEST_CASE("lsq init: s0 = 2 mean|v| / sqrt(Q_P), per tensor and per channel, LSQ+ range init", "[quant][lsq][init]") {
  const std::vector<float> v = {-1.f, 2.f, 0.5f, -0.5f, 3.f, 0.f};  // (2, 3)
  const Tensor t = Tensor::from_vector(v, {2, 3});
  const QuantSpec s4 = make_spec(4, true);
  CHECK(lsq_init_step(t, s4) == Approx(2.0 * (7.0 / 6.0) / std::sqrt(7.0)).epsilon(1e-6));
  CHECK(lsq_init_steps(t, s4).sizes() == Shape{1});
  const QuantSpec c0 = make_spec(4, false, true, 0), c1 = make_spec(4, false, true, 1);
  const auto pc0 = lsq_init_step_per_channel(t, c0).to_vector();  // rows: mean|.| = 3.5/3, 3.5/3
  REQUIRE(pc0.size() == 2);
  CHECK(pc0[0] == Approx(2.0 * (3.5 / 3) / std::sqrt(15.0)).epsilon(1e-6));
  const auto pc1 = lsq_init_steps(t, c1).to_vector();  // columns: 0.75, 2.5, 0.25
  REQUIRE(pc1.size() == 3);
  CHECK(pc1[1] == Approx(2.0 * 2.5 / std::sqrt(15.0)).epsilon(1e-6));
  CHECK(pc1[2] == Approx(2.0 * 0.25 / std::sqrt(15.0)).epsilon(1e-6));
  CHECK(lsq_init_step(Tensor::zeros({5}), s4) == kLsqStepFloor);  // never a zero step

  // LSQ+ min_max: [min, max] (widened to 0) maps onto [qmin, qmax]
  const QuantSpec u4 = make_spec(4, false);
  const Tensor a = Tensor::from_vector({-0.6f, 0.2f, 2.4f, 1.f}, {4});
  auto mm = lsq_plus_init(a, u4, LsqPlusInit::min_max);
  CHECK(mm.step.item() == Approx(3.0 / 15).epsilon(1e-6));
  CHECK(mm.offset.item() == Approx(-0.6).epsilon(1e-6));
  const auto qa = lsq_plus_quantize(a, mm.step, mm.offset, u4, 1.f).to_vector();
  CHECK(qa[0] == Approx(-0.6f).margin(1e-6));
  CHECK(qa[2] == Approx(2.4f).margin(1e-6));
  // a positive-only tensor: the range is widened to include 0
  auto pos = lsq_plus_init(Tensor::from_vector({1.f, 2.f, 3.f}, {3}), u4, LsqPlusInit::min_max);
  CHECK(pos.offset.item() == Approx(0.f).margin(1e-7));
  CHECK(pos.step.item() == Approx(3.0 / 15).epsilon(1e-6));
  // mean_std: [μ - 3σ, μ + 3σ] ∩ [min, max] (∪ 0); a Gaussian sample plus one far outlier
  std::vector<float> gv = testing::rand_tensor({4000}, 8, false).to_vector();
  gv[0] = 40.f;
  const Tensor gt = Tensor::from_vector(gv, {4000});
  double mu = 0, sq = 0, mn = 1e30;
  for (float x : gv) mu += x, mn = std::min<double>(mn, x);
  mu /= gv.size();
  for (float x : gv) sq += (x - mu) * (x - mu);
  const double sd = std::sqrt(sq / gv.size());
  const double lo = std::min(0.0, std::max(mn, mu - 3 * sd)), hi = mu + 3 * sd;
  const QuantSpec i8 = make_spec(8, true);
  auto ms = lsq_plus_init(gt, i8, LsqPlusInit::mean_std);
  CHECK(ms.step.item() == Approx((hi - lo) / 255).epsilon(1e-5));
  CHECK(ms.offset.item() == Approx(lo + 128 * (hi - lo) / 255).epsilon(1e-4));
  // per-channel shapes
  auto pcs = lsq_plus_init(t, c1);
  CHECK(pcs.step.sizes() == Shape{3});
  CHECK(pcs.offset.sizes() == Shape{3});
}

// ======================================================================== paths and errors
// Big tensors take the parallel, chunked paths (float partial sums per chunk,
// double across chunks and threads): compare with a double-precision loop.
TEST_CASE("lsq: large per-tensor and per-channel tensors match a double reference", "[quant][lsq]") {
  struct Big {
    QuantSpec spec;
    Shape shape;
  };
  for (const Big& bc : {Big{make_spec(8, true), {3 * (1 << 15) + 17}},     // per-tensor, several chunks
                        Big{make_spec(4, false, true, 1), {4, 5, 64, 65}},  // NCHW, chunks within rows
                        Big{make_spec(4, true, true, 1), {20000, 7}},       // channel axis last
                        Big{make_spec(8, true, true, 0), {9, 9000}}}) {
    INFO(bc.spec.describe() << " " << shape_str(bc.shape));
    const int64_t c = bc.spec.per_channel ? bc.shape[bc.spec.axis] : 1;
    std::vector<float> s(c), b(c);
    for (int64_t j = 0; j < c; ++j) s[j] = 0.05f + 0.01f * j, b[j] = 0.02f * j - 0.05f;
    Tensor x = mul(testing::rand_tensor(bc.shape, 21, false), 0.8f).set_requires_grad(true);
    const Tensor gy = testing::rand_tensor(bc.shape, 22, false);
    Tensor p = param(s), o = param(b);
    Tensor y = lsq_plus_quantize(x, p, o, bc.spec, 0.5f);
    y.backward(gy);
    const auto ch = channel_of(bc.shape, bc.spec);
    const auto xv = x.to_vector(), gv = gy.to_vector(), yv = y.to_vector(), dxv = x.grad().to_vector();
    std::vector<double> ds(c, 0.0), db(c, 0.0), dsa(c, 0.0);
    const float lo = static_cast<float>(bc.spec.qmin()), hi = static_cast<float>(bc.spec.qmax());
    int64_t bad_y = 0, bad_dx = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const int64_t j = ch[i];
      const float t = (xv[i] - b[j]) * (1.f / s[j]);
      const float q = std::nearbyint(std::clamp(t, lo, hi));
      bad_y += yv[i] != q * s[j] + b[j];
      const bool clipped = t <= lo || t >= hi;
      bad_dx += dxv[i] != (clipped ? 0.f : gv[i]);
      const double term = clipped ? (t <= lo ? lo : hi) : static_cast<double>(q) - t;
      ds[j] += term * gv[i], dsa[j] += std::fabs(term * gv[i]), db[j] += clipped ? gv[i] : 0.0;
    }
    CHECK(bad_y == 0);
    CHECK(bad_dx == 0);
    const auto dsv = p.grad().to_vector(), dbv = o.grad().to_vector();
    for (int64_t j = 0; j < c; ++j) {
      CHECK(dsv[j] == Approx(0.5 * ds[j]).margin(1e-6 * dsa[j]));
      CHECK(dbv[j] == Approx(0.5 * db[j]).margin(1e-6 * dsa[j]));
    }
  }
}

TEST_CASE("lsq: non-contiguous input, step-only / input-only gradients", "[quant][lsq]") {
  const QuantSpec spec = make_spec(4, true, true, 1);
  const Tensor base = testing::rand_tensor({4, 6}, 31, false);
  const Tensor view = base.narrow(1, 1, 3);  // (4, 3), not contiguous
  REQUIRE(!view.is_contiguous());
  const Tensor p = Tensor::from_vector({0.2f, 0.3f, 0.4f}, {3});
  CHECK(lsq_quantize(view, p, spec, 1.f).to_vector() == lsq_quantize(view.contiguous(), p, spec, 1.f).to_vector());
  // only the step needs a gradient
  Tensor pl = p.clone().set_requires_grad(true);
  lsq_quantize(view, pl, spec, 1.f).backward(Tensor::ones({4, 3}));
  CHECK(pl.grad().defined());
  // only the input needs one
  Tensor xl = view.contiguous().set_requires_grad(true);
  lsq_quantize(xl, p, spec, 1.f).backward(Tensor::ones({4, 3}));
  CHECK(xl.grad().defined());
}

TEST_CASE("lsq: argument errors name the op and the shapes", "[quant][lsq]") {
  const Tensor x = Tensor::zeros({2, 3});
  const QuantSpec pc = make_spec(4, true, true, 1);
  CHECK_THROWS_WITH(lsq_quantize(x, Tensor::ones({2}), pc, 1.f),
                    Catch::Contains("lsq_quantize") && Catch::Contains("(3)") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_AS(lsq_quantize(x, Tensor::ones({2}), make_spec(4, true), 1.f), Error);
  CHECK_THROWS_AS(lsq_quantize(x, Tensor::ones({1}), make_spec(4, true, true, 2), 1.f), Error);
  CHECK_THROWS_AS(lsq_plus_quantize(x, Tensor::ones({3}), Tensor::ones({1}), pc, 1.f), Error);
  QuantSpec pow2 = make_spec(8, true);
  pow2.formula = ScaleFormula::power_of_two;
  CHECK_THROWS_WITH(lsq_quantize(x, Tensor::ones({1}), pow2, 1.f), Catch::Contains("power_of_two"));
  QuantSpec bad = make_spec(9, true);
  CHECK_THROWS_AS(lsq_quantize(x, Tensor::ones({1}), bad, 1.f), Error);
}
