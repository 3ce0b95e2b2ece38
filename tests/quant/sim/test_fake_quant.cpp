// Fake quantization against PyTorch 1.13, bit for bit: forward outputs and the
// clipped-STE gradients (dy * mask) of torch.fake_quantize_per_tensor_affine
// and torch.fake_quantize_per_channel_affine, from tests/golden/gen_quant.py
// (tests/golden/quant_ops.safetensors, cases "fq_*"), including exact ties,
// their one-ulp neighbours and values far outside the range. A finite
// difference check of the STE is meaningless (the true derivative is 0 almost
// everywhere), so the masks are checked against PyTorch's gradients instead.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "quant/observe/minmax.h"
#include "quant/sim/fake_quant.h"

namespace {

using qat::testing::ThreadsGuard;

using qat::Shape;
using qat::Tensor;
using namespace qat::quant;

const qat::SafetensorsFile& golden() { return qat::testing::golden_file("quant_ops.safetensors"); }

const Tensor& gget(const std::string& name) { return qat::testing::golden_tensor(golden(), name); }

std::vector<int32_t> gints(const std::string& name) { return qat::testing::int_values(gget(name)); }

// Every case name with the given prefix ("fq_pt_"), from the ".params" keys.
std::vector<std::string> cases(const std::string& prefix) {
  return qat::testing::golden_case_names(golden(), prefix, ".params");
}

// Bitwise equality of two f32 tensors (NaN patterns and the sign of zero included).
void require_bitwise(const Tensor& actual, const Tensor& expected, const std::string& what,
                     const Tensor& x = Tensor()) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  const std::vector<float> a = actual.to_vector(), e = expected.to_vector();
  const std::vector<float> xs = x.defined() ? x.to_vector() : std::vector<float>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &e[i], sizeof(float)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  std::ostringstream msg;
  msg << what << ": " << bad << "/" << a.size() << " elements differ in bits";
  if (first >= 0) {
    msg.precision(9);
    msg << "; first at " << first << ": ours " << a[first] << ", torch " << e[first];
    if (!xs.empty()) msg << " (x = " << xs[first] << ")";
  }
  INFO(msg.str());
  CHECK(bad == 0);
}

QuantSpec spec_from_params(const std::vector<int32_t>& p) {
  // [bits, is_signed, narrow_range, per_channel, axis, qmin, qmax]
  REQUIRE(p.size() == 7);
  QuantSpec s;
  s.bits = p[0];
  s.is_signed = p[1] != 0;
  s.symmetric = false;  // the fake-quant op takes (s, z) as given; only the range matters
  s.narrow_range = p[2] != 0;
  s.per_channel = p[3] != 0;
  s.axis = p[4];
  REQUIRE(s.qmin() == p[5]);
  REQUIRE(s.qmax() == p[6]);
  return s;
}

void run_golden_case(const std::string& c) {
  INFO("case " << c);
  const QuantSpec spec = spec_from_params(gints(c + ".params"));
  Tensor x = gget(c + ".x").clone();
  x.set_requires_grad(true);
  Tensor y = fake_quantize(x, gget(c + ".scale"), gget(c + ".zero_point"), spec);
  require_bitwise(y, gget(c + ".y"), c + ".y", x);
  y.backward(gget(c + ".gy"));
  require_bitwise(x.grad(), gget(c + ".dx"), c + ".dx (clipped STE mask)", x);

  // Plain STE: the same forward, the gradient passes everywhere.
  Tensor x2 = gget(c + ".x").clone();
  x2.set_requires_grad(true);
  Tensor y2 = fake_quantize(x2, gget(c + ".scale"), gget(c + ".zero_point"), spec, SteKind::plain);
  require_bitwise(y2, gget(c + ".y"), c + ".y (plain STE)", x2);
  y2.backward(gget(c + ".gy"));
  require_bitwise(x2.grad(), gget(c + ".gy"), c + ".dx (plain STE)", x2);

  // Without autograd: same values.
  qat::NoGradGuard ng;
  require_bitwise(fake_quantize(gget(c + ".x"), gget(c + ".scale"), gget(c + ".zero_point"), spec), gget(c + ".y"),
                  c + ".y (no grad)");
}

// The defining formula, one element at a time (the reference for the
// parallel/blocked paths on large tensors).
float fq_ref(float x, float s, int32_t z, int32_t qmin, int32_t qmax, bool* in_range = nullptr) {
  const float inv = 1.0f / s;
  const float q = std::nearbyint(x * inv) + static_cast<float>(z);
  if (in_range) *in_range = q >= qmin && q <= qmax;
  const float c = std::min(std::max(q, static_cast<float>(qmin)), static_cast<float>(qmax));
  return (c - static_cast<float>(z)) * s;
}

}  // namespace

TEST_CASE("fake_quantize per-tensor matches PyTorch bit for bit (8/4/2 bits, ties, outside range)", "[quant]") {
  const auto names = cases("fq_pt_");
  REQUIRE(names.size() >= 15);
  for (const auto& c : names) run_golden_case(c);
}

TEST_CASE("fake_quantize per-channel matches PyTorch bit for bit (axes 0..3, inner size 1)", "[quant]") {
  const auto names = cases("fq_pc_");
  REQUIRE(names.size() >= 8);
  for (const auto& c : names) run_golden_case(c);
}

TEST_CASE("fake_quantize rounds exact ties to even and clips to [qmin, qmax]", "[quant]") {
  QuantSpec spec;  // int8 symmetric, [-128, 127]
  const Tensor s = Tensor::from_vector({0.25f}, {1});
  const Tensor z = Tensor::from_vector_i32({0}, {1});
  //            x/s:  0.5    1.5    -0.5    -1.5    2.5    127.5  -128.5  200
  const Tensor x = Tensor::from_vector({0.125f, 0.375f, -0.125f, -0.375f, 0.625f, 31.875f, -32.125f, 50.f}, {8});
  const std::vector<float> y = fake_quantize(x, s, z, spec).to_vector();
  const std::vector<float> want = {0.f, 0.5f, 0.f, -0.5f, 0.5f, 31.75f, -32.f, 31.75f};
  for (size_t i = 0; i < want.size(); ++i) CHECK(y[i] == want[i]);
  // 127.5 rounds to 128 (even) -> outside: gradient 0; -128.5 -> -128 (even) -> inside.
  Tensor xl = x.clone();
  xl.set_requires_grad(true);
  fake_quantize(xl, s, z, spec).backward(Tensor::ones({8}));
  const std::vector<float> g = xl.grad().to_vector();
  const std::vector<float> gwant = {1, 1, 1, 1, 1, 0, 1, 0};
  for (size_t i = 0; i < gwant.size(); ++i) CHECK(g[i] == gwant[i]);
}

// The clipped STE in place (a gradient the graph owns alone): one clipped
// element at a time at the edges of the 64-element blocks the mask is read
// in, and in a ragged last block; every other gradient passes unchanged.
TEST_CASE("fake_quantize's in-place STE stops exactly the clipped elements, wherever they sit", "[quant]") {
  QuantSpec spec;  // int8 symmetric, [-128, 127]
  const Tensor s = Tensor::from_vector({0.25f}, {1});
  const Tensor z = Tensor::from_vector_i32({0}, {1});
  const int64_t n = 200;  // three full blocks and a tail of 8
  qat::Generator gen(5);
  std::vector<float> w(n);
  for (float& v : w) v = gen.normal();
  const Tensor weights = Tensor::from_vector(w, {n});
  for (const int64_t at : {int64_t{0}, int64_t{63}, int64_t{64}, int64_t{127}, int64_t{191}, int64_t{192},
                           int64_t{199}}) {
    INFO("clipped element " << at);
    std::vector<float> xv(n);
    for (int64_t i = 0; i < n; ++i) xv[i] = 0.01f * static_cast<float>(i % 50) - 0.2f;  // inside
    xv[at] = 40.f;                                                                          // 160: outside
    Tensor x = Tensor::from_vector(xv, {n}).set_requires_grad(true);
    // d/dy of sum(y * w) is a fresh tensor, so the STE works on it in place.
    qat::sum(qat::mul(fake_quantize(x, s, z, spec), weights)).backward();
    const std::vector<float> g = x.grad().to_vector();
    for (int64_t i = 0; i < n; ++i) {
      const float want = i == at ? w[i] * 0.f : w[i];
      REQUIRE(std::memcmp(&g[i], &want, sizeof want) == 0);
    }
  }
}

TEST_CASE("fake_quantize: NaN stays NaN, infinities clip to the ends (documented deviation)", "[quant]") {
  QuantSpec spec;
  spec.bits = 4;
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector({std::nanf(""), inf, -inf, 1e30f}, {4});
  Tensor xl = x.clone();
  xl.set_requires_grad(true);
  Tensor y = fake_quantize(xl, Tensor::from_vector({0.5f}, {1}), Tensor::from_vector_i32({0}, {1}), spec);
  const std::vector<float> v = y.to_vector();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 3.5f);   // qmax 7 * 0.5
  CHECK(v[2] == -4.0f);  // qmin -8 * 0.5
  CHECK(v[3] == 3.5f);   // PyTorch: int64 overflow -> qmin
  y.backward(Tensor::ones({4}));
  for (float g : xl.grad().to_vector()) CHECK(g == 0.f);
}

TEST_CASE("fake_quantize parallel paths equal the element formula on large tensors", "[quant]") {
  const ThreadsGuard threads(2);  // the test runner uses 1; exercise the per-thread partials
  qat::Generator gen(11);
  struct Layout {
    Shape shape;
    bool per_channel;
    int64_t axis;
  };
  for (const Layout& l : {Layout{{300001}, false, 0}, Layout{{64, 3, 11, 11}, true, 0}, Layout{{4, 32, 27, 29}, true, 1},
                         Layout{{20000, 10}, true, 1}, Layout{{7, 9000, 3}, true, 2}, Layout{{1, 70000}, true, 0}}) {
    INFO("shape " << qat::shape_str(l.shape) << " axis " << l.axis);
    QuantSpec spec;
    spec.bits = 4;
    spec.is_signed = false;
    spec.per_channel = l.per_channel;
    spec.axis = l.axis;
    const int64_t C = l.per_channel ? l.shape[l.axis] : 1;
    std::vector<float> sv(C);
    std::vector<int32_t> zv(C);
    for (int64_t c = 0; c < C; ++c) sv[c] = 0.05f + 0.01f * static_cast<float>(c % 13), zv[c] = static_cast<int32_t>(c % 16);
    const Tensor s = Tensor::from_vector(sv, {C}), z = Tensor::from_vector_i32(zv, {C});
    Tensor x = Tensor::randn(l.shape, gen, 0.f, 0.6f);
    x.set_requires_grad(true);
    Tensor y = fake_quantize(x, s, z, spec);
    Tensor gy = Tensor::randn(l.shape, gen);
    y.backward(gy);
    // channel of flat index i: (i / inner) % C
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(l.axis) + 1; d < l.shape.size(); ++d) inner *= l.shape[d];
    if (!l.per_channel) inner = x.numel();
    const std::vector<float> xv = x.to_vector(), yv = y.to_vector(), gv = gy.to_vector(), dv = x.grad().to_vector();
    int64_t bad = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = l.per_channel ? (i / inner) % C : 0;
      bool in = false;
      const float r = fq_ref(xv[i], sv[c], zv[c], spec.qmin(), spec.qmax(), &in);
      if (r != yv[i] || dv[i] != (in ? gv[i] : 0.f * gv[i])) ++bad;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("fake_quantize: non-contiguous input, 0-d qparams, observe_and_fake_quantize", "[quant]") {
  qat::Generator gen(3);
  QuantSpec spec;
  const Tensor s = Tensor::from_vector({0.02f}, {1});
  const Tensor z = Tensor::from_vector_i32({3}, {1});
  Tensor base = Tensor::randn({6, 10}, gen);
  Tensor view = base.narrow(1, 2, 5);
  REQUIRE(!view.is_contiguous());
  require_bitwise(fake_quantize(view, s, z, spec), fake_quantize(view.contiguous(), s, z, spec), "narrow view");
  Tensor s0 = Tensor::from_vector({0.02f}, {});
  Tensor z0 = Tensor::from_vector_i32({3}, {1}).view({});
  require_bitwise(fake_quantize(base, s0, z0, spec), fake_quantize(base, s, z, spec), "0-d qparams");

  // observe_and_fake_quantize = observe, qparams, fake_quantize.
  QuantSpec aspec;
  aspec.is_signed = false;
  aspec.symmetric = false;
  MovingAverageMinMaxObserver obs(aspec);
  MovingAverageMinMaxObserver ref(aspec);
  for (int step = 0; step < 3; ++step) {
    Tensor x = Tensor::randn({4, 3, 5, 5}, gen, 0.1f * step, 1.f + step);
    QParams used;
    Tensor y = observe_and_fake_quantize(obs, x, SteKind::clipped, &used);
    ref.observe(x);
    const QParams q = ref.qparams();
    CHECK(used.scale.item() == q.scale.item());
    CHECK(used.zero_point.data<int32_t>()[0] == q.zero_point.data<int32_t>()[0]);
    require_bitwise(y, fake_quantize(x, q, aspec), "observe_and_fake_quantize step " + std::to_string(step));
  }
  // Frozen observer: qparams no longer move.
  obs.enabled = false;
  const float s_before = obs.qparams().scale.item();
  observe_and_fake_quantize(obs, Tensor::randn({4, 3, 5, 5}, gen, 0.f, 50.f));
  CHECK(obs.qparams().scale.item() == s_before);
}

TEST_CASE("fake_quantize rejects bad qparams with a clear error", "[quant]") {
  QuantSpec spec;
  spec.bits = 4;
  const Tensor x = Tensor::ones({2, 3});
  const Tensor z = Tensor::from_vector_i32({0}, {1});
  CHECK_THROWS_WITH(fake_quantize(x, Tensor::from_vector({0.f}, {1}), z, spec), Catch::Contains("positive"));
  CHECK_THROWS_WITH(fake_quantize(x, Tensor::from_vector({0.1f}, {1}), Tensor::from_vector_i32({8}, {1}), spec),
                    Catch::Contains("zero_point 8"));
  CHECK_THROWS_WITH(fake_quantize(x, Tensor::from_vector({0.1f, 0.2f}, {2}), Tensor::from_vector_i32({0, 0}, {2}), spec),
                    Catch::Contains("per-tensor"));
  spec.per_channel = true;
  spec.axis = 1;
  CHECK_THROWS_WITH(fake_quantize(x, Tensor::from_vector({0.1f, 0.2f}, {2}), Tensor::from_vector_i32({0, 0}, {2}), spec),
                    Catch::Contains("per-channel"));
  spec.axis = 2;
  CHECK_THROWS_WITH(fake_quantize(x, Tensor::from_vector({0.1f}, {1}), z, spec), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(fake_quantize(x, Tensor::from_vector({0.1f}, {1}), Tensor::from_vector({0.f}, {1}), QuantSpec{}),
                    Catch::Contains("int32"));
}

// Timing, not a correctness test: ./qat_tests "[.quant_bench]" -s
TEST_CASE("fake_quantize / observer throughput on 10M elements", "[.quant_bench]") {
  const ThreadsGuard threads(2);
  qat::Generator gen(5);
  const int64_t n = 10'000'000;
  Tensor x = Tensor::randn({n}, gen);
  QuantSpec spec;
  MinMaxObserver obs(spec);
  const QParams q{Tensor::from_vector({0.03f}, {1}), Tensor::from_vector_i32({0}, {1})};
  auto time_ms = [](auto&& f) {
    f();
    const auto t0 = std::chrono::steady_clock::now();
    const int reps = 10;
    for (int r = 0; r < reps; ++r) f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  Tensor xg = x.clone();
  xg.set_requires_grad(true);
  const Tensor gy = Tensor::ones({n});
  const double t_nograd = time_ms([&] { qat::NoGradGuard g; fake_quantize(x, q, spec); });
  const double t_mask = time_ms([&] { fake_quantize(xg, q, spec); });
  const double t_fwbw = time_ms([&] { fake_quantize(xg, q, spec).backward(gy); });
  const double t_obs = time_ms([&] { obs.observe(x); });
  const double t_copy = time_ms([&] { x.clone(); });
  WARN("threads " << qat::num_threads() << ", 10M f32: clone " << t_copy << " ms; fake_quantize fwd (no grad) "
                  << t_nograd << " ms (" << t_nograd * 1e6 / n << " ns/elem); fwd+mask " << t_mask
                  << " ms; fwd+bwd " << t_fwbw << " ms; observe " << t_obs << " ms");
}
