// Observers and qparams against PyTorch 1.13 (tests/golden/gen_quant.py, cases
// "obs_*"): MinMaxObserver, MovingAverageMinMaxObserver and their per-channel
// versions, symmetric and affine, quint8/qint8 (reduce_range False), narrow and
// 4-/2-bit custom ranges; min/max state and (scale, zero point) after each of
// four batches, compared exactly (both sides are the same float32 operations).
// Power-of-two scales have no PyTorch counterpart: tested by their properties.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <algorithm>
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

namespace {

using qat::testing::ThreadsGuard;

using qat::Shape;
using qat::Tensor;
using namespace qat::quant;

const qat::SafetensorsFile& golden() { return qat::testing::golden_file("quant_ops.safetensors"); }

const Tensor& gget(const std::string& name) { return qat::testing::golden_tensor(golden(), name); }

std::vector<std::string> obs_cases() { return qat::testing::golden_case_names(golden(), "obs_", ".params"); }

void require_equal_f32(const Tensor& a, const Tensor& e, const std::string& what) {
  INFO(what);
  REQUIRE(a.sizes() == e.sizes());
  const std::vector<float> av = a.to_vector(), ev = e.to_vector();
  std::ostringstream msg;
  msg.precision(9);
  int64_t bad = 0;
  for (size_t i = 0; i < av.size(); ++i)
    if (!(av[i] == ev[i])) {
      if (bad++ == 0) msg << what << " first difference at " << i << ": ours " << av[i] << ", torch " << ev[i];
    }
  INFO(msg.str());
  CHECK(bad == 0);
}

void require_equal_i32(const Tensor& a, const Tensor& e, const std::string& what) {
  INFO(what);
  REQUIRE(a.dtype() == qat::DType::i32);
  REQUIRE(e.dtype() == qat::DType::i32);
  REQUIRE(a.sizes() == e.sizes());
  for (int64_t i = 0; i < a.numel(); ++i) {
    INFO("index " << i);
    CHECK(a.data<int32_t>()[i] == e.data<int32_t>()[i]);
  }
}

}  // namespace

TEST_CASE("observers match PyTorch's min/max state and qparams after each batch", "[quant]") {
  const auto names = obs_cases();
  REQUIRE(names.size() >= 20);
  for (const auto& c : names) {
    INFO("case " << c);
    const Tensor& pt = gget(c + ".params");
    const int32_t* p = pt.data<int32_t>();  // [bits, signed, symmetric, narrow, per_channel, axis, qmin, qmax, ma]
    REQUIRE(pt.numel() == 9);
    QuantSpec spec;
    spec.bits = p[0];
    spec.is_signed = p[1] != 0;
    spec.symmetric = p[2] != 0;
    spec.narrow_range = p[3] != 0;
    spec.per_channel = p[4] != 0;
    spec.axis = p[5];
    REQUIRE(spec.qmin() == p[6]);
    REQUIRE(spec.qmax() == p[7]);
    const Tensor& b0 = gget(c + ".b0");
    const int64_t C = spec.per_channel ? b0.size(spec.axis) : 1;
    const auto obs = make_observer(p[8] ? QuantMethod::moving_average : QuantMethod::minmax, spec, C,
                                   gget(c + ".c").item());
    CHECK(!obs->initialized());
    for (int i = 0; i < 4; ++i) {
      const std::string k = std::to_string(i);
      obs->observe(gget(c + ".b" + k));
      require_equal_f32(obs->range().min_val, gget(c + ".min_" + k), c + ".min_" + k);
      require_equal_f32(obs->range().max_val, gget(c + ".max_" + k), c + ".max_" + k);
      const QParams q = obs->qparams();
      require_equal_f32(q.scale, gget(c + ".scale_" + k), c + ".scale_" + k);
      require_equal_i32(q.zero_point, gget(c + ".zp_" + k), c + ".zp_" + k);
    }
    CHECK(obs->initialized());
  }
}

TEST_CASE("observer: state handles, reset, enabled flag, uninitialised qparams", "[quant]") {
  QuantSpec spec;
  spec.per_channel = true;
  spec.axis = 0;
  MinMaxObserver obs(spec, 3);
  const NamedTensors st = obs.state();
  REQUIRE(st.size() == 2);
  CHECK(st[0].first == "min_val");
  CHECK(st[1].first == "max_val");
  CHECK(st[0].second.sizes() == Shape{3});
  CHECK(st[0].second.impl_ptr() == obs.min_val().impl_ptr());

  // Nothing observed: PyTorch's default qparams (1, 0), here per channel.
  QParams q = obs.qparams();
  CHECK(q.scale.sizes() == Shape{3});
  for (float s : q.scale.to_vector()) CHECK(s == 1.f);

  obs.observe(Tensor::from_vector({-1, 2, -3, 4, 0.5f, 0.25f}, {3, 2}));
  CHECK(obs.min_val().to_vector() == std::vector<float>{-1, -3, 0.25f});
  CHECK(obs.max_val().to_vector() == std::vector<float>{2, 4, 0.5f});

  obs.enabled = false;
  obs.observe(Tensor::from_vector({-100, 100, -100, 100, -100, 100}, {3, 2}));
  CHECK(obs.min_val().to_vector() == std::vector<float>{-1, -3, 0.25f});
  obs.enabled = true;

  // A checkpoint load writes into the registered handles; the observer sees it.
  Tensor handle = st[1].second;
  handle.copy_(Tensor::from_vector({7, 8, 9}, {3}));
  CHECK(obs.max_val().to_vector() == std::vector<float>{7, 8, 9});

  obs.reset();
  CHECK(!obs.initialized());
  CHECK(obs.min_val().impl_ptr() == st[0].second.impl_ptr());
  CHECK(std::isinf(obs.min_val().to_vector()[1]));

  // Empty input: no change. Wrong channel count: error naming both.
  obs.observe(Tensor::empty({0, 2}));
  CHECK(!obs.initialized());
  CHECK_THROWS_WITH(obs.observe(Tensor::ones({4, 2})), Catch::Contains("expected 3 channels"));
  CHECK_THROWS_WITH(MinMaxObserver(QuantSpec{}, 4), Catch::Contains("channels = 1"));
}

TEST_CASE("observer reduction: parallel paths equal a serial reference, NaN ignored", "[quant]") {
  const ThreadsGuard threads(2);  // the test runner uses 1; exercise the per-thread partials
  qat::Generator gen(21);
  struct L {
    Shape shape;
    bool per_channel;
    int64_t axis;
  };
  for (const L& l : {L{{1000003}, false, 0}, L{{64, 4099}, true, 0}, L{{8, 16, 33, 35}, true, 1},
                    L{{50000, 10}, true, 1}, L{{3, 5000, 7}, true, 2}, L{{2, 3, 70000}, true, 2},
                    L{{1, 80000}, true, 0}, L{{5, 3}, true, 1}}) {
    INFO("shape " << qat::shape_str(l.shape) << " axis " << l.axis);
    Tensor x = Tensor::randn(l.shape, gen);
    const std::vector<float> xv = x.to_vector();
    const int64_t C = l.per_channel ? l.shape[l.axis] : 1;
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(l.axis) + 1; d < l.shape.size(); ++d) inner *= l.shape[d];
    if (!l.per_channel) inner = x.numel();
    std::vector<float> rmn(C, INFINITY), rmx(C, -INFINITY);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = (i / inner) % C;
      rmn[c] = std::min(rmn[c], xv[i]);
      rmx[c] = std::max(rmx[c], xv[i]);
    }
    std::vector<float> mn(C), mx(C);
    reduce_minmax(x, l.per_channel, l.axis, mn.data(), mx.data());
    CHECK(mn == rmn);
    CHECK(mx == rmx);
  }
  // NaNs do not enter the statistics (PyTorch would propagate them).
  Tensor x = Tensor::from_vector({std::nanf(""), 1.f, -2.f, std::nanf("")}, {4});
  float mn = 0, mx = 0;
  reduce_minmax(x, false, 0, &mn, &mx);
  CHECK(mn == -2.f);
  CHECK(mx == 1.f);
}

TEST_CASE("qparams: PyTorch formulas by hand (symmetric /127.5, narrow /127, min_scale, errors)", "[quant]") {
  auto one = [](const QuantSpec& s, float lo, float hi) {
    float sc = 0;
    int32_t z = -1;
    qparams_from_range(s, lo, hi, sc, z);
    return std::pair<float, int32_t>{sc, z};
  };
  QuantSpec sym;  // int8 symmetric [-128, 127]: s = absmax / 127.5
  CHECK(one(sym, -2.55f, 1.f) == std::pair<float, int32_t>{2.55f / 127.5f, 0});
  QuantSpec narrow = sym;
  narrow.narrow_range = true;  // [-127, 127]: s = absmax / 127
  CHECK(one(narrow, -1.f, 1.27f) == std::pair<float, int32_t>{1.27f / 127.f, 0});
  QuantSpec usym = sym;
  usym.is_signed = false;  // quint8 symmetric: z = 128
  CHECK(one(usym, -1.f, 2.f).second == 128);
  usym.bits = 4;
  CHECK(one(usym, -1.f, 2.f).second == 8);
  QuantSpec aff;
  aff.is_signed = false;
  aff.symmetric = false;  // quint8 affine: range widened to include 0
  CHECK(one(aff, 1.f, 2.55f) == std::pair<float, int32_t>{2.55f / 255.f, 0});
  CHECK(one(aff, -2.55f, -1.f) == std::pair<float, int32_t>{2.55f / 255.f, 255});
  // Scale floor: FLT_EPSILON, or min_scale when larger (zero point from the clamped scale).
  CHECK(one(aff, 0.f, 0.f) == std::pair<float, int32_t>{1.1920929e-07f, 0});
  // Zero point ties round half to even, as torch.round: -(-1) / 2 = 0.5 -> 0, 1.5 -> 2 (std::round: 1, 2).
  CHECK(one(aff, -1.f, 509.f) == std::pair<float, int32_t>{2.f, 0});
  CHECK(one(aff, -3.f, 507.f) == std::pair<float, int32_t>{2.f, 2});
  CHECK(one(aff, -5.f, 505.f) == std::pair<float, int32_t>{2.f, 2});
  aff.min_scale = 0.5f;
  CHECK(one(aff, -1.f, 1.f) == std::pair<float, int32_t>{0.5f, 2});
  CHECK_THROWS_WITH(one(sym, 1.f, -1.f), Catch::Contains("min 1 > max -1"));
  CHECK_THROWS_WITH(one(sym, -INFINITY, 1.f), Catch::Contains("not finite"));
  CHECK(one(sym, INFINITY, -INFINITY) == std::pair<float, int32_t>{1.f, 0});  // nothing observed
}

TEST_CASE("qparams: power-of-two scales are exact powers of two covering absmax", "[quant]") {
  qat::Generator gen(9);
  for (int bits = 2; bits <= 8; ++bits) {
    for (int variant = 0; variant < 3; ++variant) {  // signed, signed narrow, unsigned
      QuantSpec spec;
      spec.bits = bits;
      spec.formula = ScaleFormula::power_of_two;
      spec.is_signed = variant < 2;
      spec.narrow_range = variant == 1;
      const int mag = spec.is_signed ? bits - 1 : bits;  // magnitude bits: absmax / s in [2^(mag-1), 2^mag)
      std::vector<std::pair<float, float>> ranges = {{-1.f, 1.f},     {-0.5f, 0.25f}, {-3.f, 7.9f},  {0.f, 1e-3f},
                                                     {-1e4f, 3.f},    {-0.3f, 2.f},   {0.f, 4.f},    {-4.f, 0.f},
                                                     {-1e-5f, 2e-5f}, {-0.999f, 0.f}, {1.f, 1.99f}};
      for (int i = 0; i < 40; ++i) {
        const float a = std::exp(Tensor::uniform({1}, gen, -12.f, 12.f).item());
        ranges.push_back({-a * Tensor::uniform({1}, gen, 0.f, 1.f).item(), a});
      }
      for (const auto& [lo, hi] : ranges) {
        INFO(spec.describe() << " range [" << lo << ", " << hi << "]");
        float s = 0;
        int32_t z = -1;
        qparams_from_range(spec, lo, hi, s, z);
        int e = 0;
        CHECK(std::frexp(s, &e) == 0.5f);  // exact power of two
        CHECK(z == 0);
        const float absmax = spec.is_signed ? std::max(-std::min(lo, 0.f), std::max(hi, 0.f)) : std::max(hi, 0.f);
        // Covers absmax to within one step (clamp(round(absmax / s)) loses less than a step) ...
        CHECK(absmax < static_cast<float>(spec.qmax() + 1) * s);
        // ... and is the smallest power of two that does, unless clamped up to the floor 2^-23.
        if (s > std::ldexp(1.f, -23)) CHECK(absmax / s >= std::ldexp(1.f, mag - 1));
        CHECK(s >= std::ldexp(1.f, -23));
      }
      // absmax == 0: the floor (FLT_EPSILON = 2^-23), or min_scale rounded up to a power of two.
      float s = 0;
      int32_t z = -1;
      qparams_from_range(spec, 0.f, 0.f, s, z);
      CHECK(s == std::ldexp(1.f, -23));
      spec.min_scale = 0.001f;
      qparams_from_range(spec, 0.f, 1e-4f, s, z);
      CHECK(s == std::ldexp(1.f, -9));
      qparams_from_range(spec, -1000.f, 1e-4f, s, z);  // signed: absmax 1000 in [2^9, 2^10); unsigned: 1e-4
      CHECK(s == (spec.is_signed ? std::ldexp(1.f, 10 - mag) : std::ldexp(1.f, -9)));
    }
  }
  // Cambricon's formula (docs/math/fake_quant.md §2) at 8 bits: shift = floor(log2(absmax)) - 6.
  QuantSpec p8;
  p8.formula = ScaleFormula::power_of_two;
  float s = 0;
  int32_t z = 0;
  qparams_from_range(p8, -1.f, 0.5f, s, z);
  CHECK(s == 1.f / 64);
  qparams_from_range(p8, -0.2f, 1.99f, s, z);
  CHECK(s == 1.f / 64);
  qparams_from_range(p8, -0.2f, 2.f, s, z);
  CHECK(s == 1.f / 32);
}
