// Gradient quantization for INT8 training (quant/int8_training/grad_quant.h, Zhu et al.
// 2020): stochastic rounding's unbiasedness against the binomial standard
// error, reproducibility and thread independence, saturation, the cosine
// distance on exact and hand-computed cases, the clip search against a
// 4000-point brute-force scan, the learning-rate scale and NaN propagation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/enum_names.h"
#include "core/generator.h"
#include "quant/int8_training/grad_quant.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> normal_values(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> g(static_cast<size_t>(n));
  for (float& v : g) v = gen.normal();
  return g;
}

// Student-t with `dof` degrees of freedom: z / sqrt(chi2_dof / dof).
std::vector<float> student_t(int64_t n, int dof, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> g(static_cast<size_t>(n));
  for (float& v : g) {
    const double z = gen.normal();
    double chi2 = 0;
    for (int k = 0; k < dof; ++k) {
      const double y = gen.normal();
      chi2 += y * y;
    }
    v = static_cast<float>(z / std::sqrt(chi2 / dof));
  }
  return g;
}

// Laplace(0, 1) by inversion.
std::vector<float> laplace(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> g(static_cast<size_t>(n));
  for (float& v : g) {
    const double u = gen.uniform() - 0.5;
    v = static_cast<float>((u < 0 ? 1 : -1) * std::log(1 - 2 * std::fabs(u)));
  }
  return g;
}

GradQuantStats quantize(const std::vector<float>& g, float clip, int bits, GradRounding r, uint64_t key,
                        uint64_t index0, std::vector<int8_t>& out) {
  out.assign(g.size(), int8_t{99});
  return quantize_grad(g.data(), static_cast<int64_t>(g.size()), clip, bits, r, key, index0, out.data());
}

bool same_stats(const GradQuantStats& a, const GradQuantStats& b) {
  return a.dot == b.dot && a.qq == b.qq && a.gg == b.gg;
}

}  // namespace

TEST_CASE("grad quant: enum names and qmax", "[quant][gradquant]") {
  CHECK(std::string(enum_name(GradRounding::stochastic)) == "stochastic");
  CHECK(std::string(enum_name(GradRounding::nearest)) == "nearest");
  CHECK(enum_from_name<GradRounding>("nearest") == GradRounding::nearest);
  CHECK(enum_name_list<GradRounding>() == "stochastic, nearest");
  CHECK(grad_qmax(2) == 1);
  CHECK(grad_qmax(4) == 7);
  CHECK(grad_qmax(8) == 127);
  CHECK_THROWS_AS(grad_qmax(1), Error);
  CHECK_THROWS_AS(grad_qmax(9), Error);
}

TEST_CASE("grad quant: stochastic rounding is unbiased and nearest is not", "[quant][gradquant]") {
  // s = 1/8 (clip 127/8 on 8 bits): x = g / s is exact, so E[q] = x up to
  // u's 2^-24 grid. q takes floor(x) + Bernoulli(f), f = frac(x): the mean of
  // N draws has standard error sqrt(f (1 - f) / N); allow 5 of them.
  constexpr int64_t N = 200000;
  const float clip = 127.0f / 8;
  const float s = 1.0f / 8;
  for (const float x : {0.3f, -2.71f, 5.5f, 3.0f, 126.6f, -0.01f}) {
    INFO("x = g / s = " << x);
    const std::vector<float> g(N, x * s);
    std::vector<int8_t> q;
    quantize(g, clip, 8, GradRounding::stochastic, 1234, 0, q);
    const double lo = std::floor(static_cast<double>(x)), f = x - lo;
    int64_t sum = 0;
    for (const int8_t v : q) {
      REQUIRE((v == lo || v == lo + 1));  // only the two neighbours
      sum += v;
    }
    const double mean = static_cast<double>(sum) / N;
    const double se = std::sqrt(f * (1 - f) / N);
    CAPTURE(mean, se);
    CHECK(std::fabs(mean - x) <= 5 * se + 0x1.0p-24);

    // Nearest rounding: every q is nearbyint(x); off by min(f, 1 - f), far
    // beyond the standard error, whenever x is not an integer.
    quantize(g, clip, 8, GradRounding::nearest, 1234, 0, q);
    const double near = std::nearbyint(x);
    CHECK(std::all_of(q.begin(), q.end(), [&](int8_t v) { return v == near; }));
    if (f != 0) CHECK(std::fabs(near - x) > 10 * se);
  }
}

TEST_CASE("grad quant: floor(x + u) is exact at the rounding boundary", "[quant][gradquant]") {
  // x = 0.25: q = 1 exactly when u >= 0.75 (probability frac(x)); the largest
  // u below that still gives 0 (a float sum 0.25f + u could round up).
  const float below = 0.75f - 0x1.0p-24f;
  CHECK(quantize_grad_value(0.25f, 1.0f, 127, GradRounding::stochastic, 0.75f) == 1);
  CHECK(quantize_grad_value(0.25f, 1.0f, 127, GradRounding::stochastic, below) == 0);
  // Near the top of the grid the float sum loses u's low bits; double does not.
  const float x = 100.25f;
  CHECK(quantize_grad_value(x, 1.0f, 127, GradRounding::stochastic, below) == 100);
  CHECK(quantize_grad_value(x, 1.0f, 127, GradRounding::stochastic, 0.75f) == 101);
  CHECK(quantize_grad_value(-0.25f, 1.0f, 127, GradRounding::stochastic, 0.25f) == 0);
  CHECK(quantize_grad_value(-0.25f, 1.0f, 127, GradRounding::stochastic, 0.25f - 0x1.0p-24f) == -1);
  // Integers stay put for every u; nearest rounds ties to even.
  CHECK(quantize_grad_value(7.0f, 1.0f, 127, GradRounding::stochastic, 1.0f - 0x1.0p-24f) == 7);
  CHECK(quantize_grad_value(2.5f, 1.0f, 127, GradRounding::nearest, 0.9f) == 2);
  CHECK(quantize_grad_value(3.5f, 1.0f, 127, GradRounding::nearest, 0.0f) == 4);
  // NaN gives 0 (documented), never an undefined cast.
  CHECK(quantize_grad_value(kNaN, 1.0f, 127, GradRounding::stochastic, 0.5f) == 0);
  CHECK(quantize_grad_value(kNaN, 1.0f, 127, GradRounding::nearest, 0.5f) == 0);
}

TEST_CASE("grad quant: sr_uniform lies in 0 to 1 on a 2^-24 grid with uniform moments", "[quant][gradquant]") {
  constexpr int64_t N = 1000000;
  double sum = 0, sum2 = 0;
  float mn = 1, mx = 0;
  for (int64_t i = 0; i < N; ++i) {
    const float u = sr_uniform(77, static_cast<uint64_t>(i));
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    REQUIRE(std::ldexp(static_cast<double>(u), 24) == std::floor(std::ldexp(static_cast<double>(u), 24)));
    mn = std::min(mn, u), mx = std::max(mx, u);
    sum += u, sum2 += static_cast<double>(u) * u;
  }
  const double mean = sum / N, var = sum2 / N - mean * mean;
  CAPTURE(mean, var, mn, mx);
  // Mean: sd 1/sqrt(12 N); variance of U^2 is 1/5 - 1/9 = 4/45, so the
  // second moment has sd sqrt(4/45 / N). 5 sd each.
  CHECK(std::fabs(mean - 0.5) <= 5 / std::sqrt(12.0 * N));
  CHECK(std::fabs(var - 1.0 / 12) <= 5 * std::sqrt(4.0 / 45 / N) + 5 / std::sqrt(12.0 * N));
  CHECK(mn < 1e-4f);
  CHECK(mx > 1 - 1e-4f);
  // A pure function of (key, index).
  CHECK(sr_uniform(5, 9) == sr_uniform(5, 9));
  CHECK(sr_uniform(5, 9) != sr_uniform(6, 9));
  CHECK(sr_uniform(5, 9) != sr_uniform(5, 10));
}

TEST_CASE("grad quant: stochastic output is reproducible and independent of threads", "[quant][gradquant]") {
  // Many chunks and a ragged end, so the parallel path and the lanes' tail
  // run; long-tailed values, so a different summation order would round
  // differently.
  const int64_t n = 20 * 16384 + 1001;
  const std::vector<float> g = student_t(n, 3, 3);
  const float clip = 2.5f;
  std::vector<int8_t> a, b, c;
  const GradQuantStats sa = quantize(g, clip, 8, GradRounding::stochastic, 42, 7, a);
  const GradQuantStats sb = quantize(g, clip, 8, GradRounding::stochastic, 42, 7, b);
  CHECK(a == b);
  CHECK(same_stats(sa, sb));

  // Another key: each q moves with probability 2 f (1 - f), 1/3 on average
  // over uniform fractions.
  quantize(g, clip, 8, GradRounding::stochastic, 43, 7, c);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += a[static_cast<size_t>(i)] != c[static_cast<size_t>(i)];
  CAPTURE(differ, n);
  CHECK(differ > n / 4);

  // Thread counts 1, 2 and 3: outputs and sums bit for bit.
  for (const GradRounding r : {GradRounding::stochastic, GradRounding::nearest}) {
    std::vector<int8_t> q1;
    GradQuantStats s1;
    double d1;
    {
      qat::testing::ThreadsGuard threads(1);
      s1 = quantize(g, clip, 8, r, 42, 7, q1);
      d1 = clip_cosine_distance(g.data(), n, clip, 8);
    }
    for (const int t : {2, 3}) {
      INFO(enum_name(r) << " with " << t << " threads");
      qat::testing::ThreadsGuard threads(t);
      std::vector<int8_t> q;
      CHECK(same_stats(quantize(g, clip, 8, r, 42, 7, q), s1));
      CHECK(q == q1);
      CHECK(clip_cosine_distance(g.data(), n, clip, 8) == d1);
    }
  }

  // In pieces (index0 = the piece's offset) equals whole.
  const int64_t half = 20000;
  std::vector<int8_t> pieces(static_cast<size_t>(n));
  quantize_grad(g.data(), half, clip, 8, GradRounding::stochastic, 42, 7, pieces.data());
  quantize_grad(g.data() + half, n - half, clip, 8, GradRounding::stochastic, 42, 7 + half, pieces.data() + half);
  CHECK(pieces == a);
}

TEST_CASE("grad quant: values beyond the clip saturate at qmax", "[quant][gradquant]") {
  for (int bits = 2; bits <= 8; ++bits) {
    const int qmax = grad_qmax(bits);
    const float clip = 0.75f;
    const std::vector<float> g = {clip, -clip, 1.5f * clip, -10 * clip, kInf, -kInf, 1e30f, 0.0f, -0.0f};
    const std::vector<int> want = {qmax, -qmax, qmax, -qmax, qmax, -qmax, qmax, 0, 0};
    for (const GradRounding r : {GradRounding::stochastic, GradRounding::nearest}) {
      INFO("bits " << bits << " " << enum_name(r));
      std::vector<int8_t> q;
      quantize(g, clip, bits, r, 9, 0, q);
      for (size_t i = 0; i < g.size(); ++i) {
        INFO("g = " << g[i]);
        CHECK(q[i] == want[i]);
      }
    }
    // At the edge: x = qmax exactly plus any u stays qmax.
    CHECK(quantize_grad_value(static_cast<float>(qmax), 1.0f, qmax, GradRounding::stochastic, 0.999f) == qmax);
    CHECK(quantize_grad_value(-static_cast<float>(qmax) - 0.5f, 1.0f, qmax, GradRounding::stochastic, 0.0f) ==
          -qmax);
  }
  std::vector<int8_t> q;
  CHECK_THROWS_AS(quantize({1.0f}, -1.0f, 8, GradRounding::nearest, 0, 0, q), Error);
  CHECK_THROWS_AS(quantize({1.0f}, kNaN, 8, GradRounding::nearest, 0, 0, q), Error);
  CHECK_THROWS_AS(quantize({1.0f}, 1.0f, 9, GradRounding::nearest, 0, 0, q), Error);
}

TEST_CASE("grad quant: cosine distance is exact on the grid and on a hand example", "[quant][gradquant]") {
  // A gradient on the grid (s = 1/8): q == x and d is exactly 0 for both roundings.
  std::vector<float> g;
  for (int k = -127; k <= 127; ++k) g.push_back(static_cast<float>(k) / 8);
  for (const GradRounding r : {GradRounding::stochastic, GradRounding::nearest}) {
    std::vector<int8_t> q;
    const GradQuantStats s = quantize(g, 127.0f / 8, 8, r, 5, 0, q);
    for (size_t i = 0; i < g.size(); ++i) REQUIRE(q[i] == static_cast<int>(i) - 127);
    CHECK(s.dot == s.qq);
    CHECK(s.qq == s.gg);
    CHECK(cosine_distance(s) == 0.0);
  }
  CHECK(clip_cosine_distance(g.data(), static_cast<int64_t>(g.size()), 127.0f / 8, 8) == 0.0);
  // qq = gg = dot = 2: sqrt(2) sqrt(2) is not 2 in double, sqrt(2 * 2) is.
  const std::vector<float> two = {1.0f / 8, -1.0f / 8};
  CHECK(clip_cosine_distance(two.data(), 2, 127.0f / 8, 8) == 0.0);

  // Hand example, 2 bits (qmax 1), clip 1 so s = 1: x = (0.25, -1.25, 2.5)
  // rounds to (0, -1, 1) (2.5 -> 2 -> clipped). dot = 1.25 + 2.5 = 3.75,
  // qq = 2, gg = 0.0625 + 1.5625 + 6.25 = 7.875: every sum exact in double.
  const std::vector<float> h = {0.25f, -1.25f, 2.5f};
  std::vector<int8_t> q;
  const GradQuantStats s = quantize(h, 1.0f, 2, GradRounding::nearest, 0, 0, q);
  CHECK(q == std::vector<int8_t>{0, -1, 1});
  CHECK(s.dot == 3.75);
  CHECK(s.qq == 2.0);
  CHECK(s.gg == 7.875);
  CHECK(cosine_distance(s) == 1 - 3.75 / std::sqrt(15.75));  // 0.0550888...
  CHECK(cosine_distance(s) == Approx(0.0550888175).epsilon(1e-9));
  CHECK(clip_cosine_distance(h.data(), 3, 1.0f, 2) == cosine_distance(s));

  // Stats by hand: identical direction, orthogonal, opposite; the special cases.
  CHECK(cosine_distance({2, 4, 1}) == 0.0);
  CHECK(cosine_distance({0, 1, 1}) == 1.0);
  CHECK(cosine_distance({-1, 1, 1}) == 2.0);
  CHECK(cosine_distance({0, 0, 0}) == 0.0);  // all-zero gradient: reproduced exactly
  CHECK(cosine_distance({0, 0, 3}) == 1.0);  // everything rounded to 0
  GradQuantStats sum{1, 2, 3};
  sum.add({10, 20, 30});
  CHECK(same_stats(sum, {11, 22, 33}));

  // clip 0 ("nothing to quantize"): zeros out; distance 0 only for a zero gradient.
  const std::vector<float> zeros(5, 0.0f);
  const GradQuantStats z = quantize(zeros, 0.0f, 8, GradRounding::stochastic, 0, 0, q);
  CHECK(q == std::vector<int8_t>(5, 0));
  CHECK(cosine_distance(z) == 0.0);
  CHECK(cosine_distance(quantize(h, 0.0f, 8, GradRounding::nearest, 0, 0, q)) == 1.0);
  CHECK(q == std::vector<int8_t>(3, 0));
}

TEST_CASE("grad quant: clip_cosine_distance equals a direct float64 cosine", "[quant][gradquant]") {
  const std::vector<float> g = student_t(50000, 3, 11);
  for (const int bits : {2, 4, 8}) {
    for (const float clip : {0.1f, 1.0f, 3.0f, 30.0f}) {
      INFO("bits " << bits << " clip " << clip);
      std::vector<int8_t> q;
      quantize(g, clip, bits, GradRounding::nearest, 0, 0, q);
      const double s = clip / grad_qmax(bits);
      double dot = 0, qq = 0, gg = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        const double y = q[i] * s;
        dot += g[i] * y, qq += y * y, gg += static_cast<double>(g[i]) * g[i];
      }
      const double ref = 1 - dot / std::sqrt(qq * gg);
      CHECK(std::fabs(clip_cosine_distance(g.data(), static_cast<int64_t>(g.size()), clip, bits) - ref) <= 1e-12);
    }
  }
}

TEST_CASE("grad quant: search_clip matches a 4000-point brute-force scan", "[quant][gradquant]") {
  // Brute force: d at clips max|g| k / 4000, k = 1..4000. The search ends
  // with a golden-section bracket log(2^(1/2)) 0.618^10 = 2.8e-3 wide in log c:
  // its clip is that close to the optimum, not closer. Tolerance:
  // how much d itself rises within that distance of the brute-force optimum
  // (the largest excess at brute_clip e^(+-1.4e-3), e^(+-2.8e-3)): 1.5e-5 to
  // 5.5e-5 of d for the long tails, 4.7e-3 for uniform data (where d is jagged:
  // rounding errors of x up to 127 decorrelate within ~1% of c). Measured
  // (search - brute) / brute, cases in order: -1.1e-7, -2.1e-7, 5.2e-7, 8.6e-5.
  struct Case {
    const char* name;
    std::vector<float> g;
    int bits;
    double max_ratio, min_ratio;  // clip / max|g| expected in [min_ratio, max_ratio]
  };
  std::vector<Case> cases;
  // Long tails: the optimum clip is well below max|g|.
  cases.push_back({"Student-t 3 dof, 8 bits", student_t(400000, 3, 21), 8, 0.55, 0.0});
  cases.push_back({"Student-t 3 dof, 4 bits", student_t(100000, 3, 22), 4, 0.2, 0.0});
  std::vector<float> lap = laplace(200000, 23);
  lap[123] = 200.0f, lap[4567] = -150.0f;  // two huge outliers
  cases.push_back({"Laplace with outliers, 8 bits", lap, 8, 0.65, 0.0});
  // Uniform: nothing to clip, the best clip is near max|g|.
  std::vector<float> uni(100000);
  Generator gen(24);
  for (float& v : uni) v = gen.uniform(-1.0f, 1.0f);
  cases.push_back({"uniform, 8 bits", uni, 8, 1.0, 0.98});

  for (const Case& c : cases) {
    INFO(c.name);
    const int64_t n = static_cast<int64_t>(c.g.size());
    const float m = max_abs(c.g.data(), n);
    double brute = std::numeric_limits<double>::infinity();
    float brute_clip = 0;
    for (int k = 1; k <= 4000; ++k) {
      const float clip = m * (static_cast<float>(k) / 4000);
      const double d = clip_cosine_distance(c.g.data(), n, clip, c.bits);
      if (d < brute) brute = d, brute_clip = clip;
    }
    const ClipSearch s = search_clip(c.g.data(), n, c.bits);
    const double at_max = clip_cosine_distance(c.g.data(), n, m, c.bits);
    double rise = 0;  // d's rise within the search's resolution of the optimum
    for (const double f : {-2.8e-3, -1.4e-3, 1.4e-3, 2.8e-3})
      rise = std::max(rise, clip_cosine_distance(c.g.data(), n, brute_clip * std::exp(f), c.bits) - brute);
    INFO("max|g| " << m << "  brute d " << brute << " at " << brute_clip << "  search d " << s.distance << " at "
                   << s.clip << " (" << s.clip / m << " max)  d(max|g|) " << at_max << "  search - brute "
                   << s.distance - brute << "  tolerance " << rise);
    CHECK(s.evaluations == 49 + 12);
    CHECK(s.clip > 0);
    CHECK(s.clip <= m);
    CHECK(s.distance == clip_cosine_distance(c.g.data(), n, s.clip, c.bits));
    CHECK(s.distance <= brute + rise);
    CHECK(s.clip / m <= c.max_ratio);
    CHECK(s.clip / m >= c.min_ratio);
    if (c.max_ratio < 1) CHECK(s.distance < 0.9 * at_max);  // clipping pays
  }
}

TEST_CASE("grad quant: search_clip edge cases", "[quant][gradquant]") {
  const std::vector<float> zeros(1000, 0.0f);
  ClipSearch s = search_clip(zeros.data(), 1000, 8);
  CHECK(s.clip == 0.0f);
  CHECK(s.distance == 0.0);
  CHECK(s.evaluations == 0);
  s = search_clip(nullptr, 0, 8);
  CHECK(s.clip == 0.0f);
  CHECK(s.evaluations == 0);

  // Already on the max|g| grid: found at once, d = 0, no refinement.
  std::vector<float> g;
  for (int k = -7; k <= 7; ++k) g.push_back(static_cast<float>(k) / 4);
  s = search_clip(g.data(), static_cast<int64_t>(g.size()), 4);
  CHECK(s.clip == 1.75f);
  CHECK(s.distance == 0.0);
  CHECK(s.evaluations == 49);

  g[3] = kNaN;
  CHECK_THROWS_AS(search_clip(g.data(), static_cast<int64_t>(g.size()), 8), Error);
  g[3] = -kInf;
  CHECK_THROWS_AS(search_clip(g.data(), static_cast<int64_t>(g.size()), 8), Error);

  // Tiny but finite: the grid's small clips have steps whose inverse
  // overflows float; they are skipped (they threw, stopping training).
  for (const int bits : {8, 4}) {
    INFO(bits << " bits");
    const float lowest = usable_clip_min(bits);
    const float qmax = static_cast<float>(grad_qmax(bits));
    for (const float c : {lowest, std::nextafter(lowest, 1.0f), 2 * lowest, 1e-30f})
      CHECK(std::isfinite(1.0f / (c / qmax)));
    CHECK_FALSE(std::isfinite(1.0f / (0.5f * lowest / qmax)));  // (the least such clip, give or take rounding)
    CHECK(usable_clip(lowest, bits) == lowest);
    CHECK(usable_clip(std::nextafter(lowest, 0.0f), bits) == 0.0f);
    std::vector<float> tiny;
    for (int k = -7; k <= 7; ++k) tiny.push_back(static_cast<float>(k) * 2e-34f);  // max|g| 1.4e-33
    s = search_clip(tiny.data(), static_cast<int64_t>(tiny.size()), bits);
    CHECK(s.clip >= lowest);
    CHECK(s.clip <= max_abs(tiny.data(), static_cast<int64_t>(tiny.size())));
    CHECK(std::isfinite(s.distance));
    // Below the least usable clip: zeros, as for an all-zero gradient.
    for (float& v : tiny) v *= 1e-6f;  // max|g| 1.4e-39
    s = search_clip(tiny.data(), static_cast<int64_t>(tiny.size()), bits);
    CHECK(s.clip == 0.0f);
    CHECK(s.evaluations == 0);
  }
}

TEST_CASE("grad quant: lr_scale_for is exp(-alpha d) floored at beta", "[quant][gradquant]") {
  CHECK(lr_scale_for(0.0, 20, 0.1) == 1.0);
  CHECK(lr_scale_for(0.05, 20, 0.1) == std::exp(-20 * 0.05));
  CHECK(lr_scale_for(0.01, 20, 0.1) == std::exp(-20 * 0.01));
  CHECK(lr_scale_for(0.5, 20, 0.1) == 0.1);  // exp(-10) = 4.5e-5 < beta
  CHECK(lr_scale_for(2.0, 20, 0.1) == 0.1);
  CHECK(lr_scale_for(0.1, 20, 0.1) == std::exp(-2.0));
  CHECK(lr_scale_for(0.05, 20, 0.1) > lr_scale_for(0.06, 20, 0.1));
}

TEST_CASE("grad quant: max_abs propagates NaN", "[quant][gradquant]") {
  CHECK(max_abs(nullptr, 0) == 0.0f);
  const std::vector<float> a = {1.0f, -3.5f, 2.0f};
  CHECK(max_abs(a.data(), 3) == 3.5f);
  const std::vector<float> b = {1.0f, -kInf};
  CHECK(max_abs(b.data(), 2) == kInf);
  // Large (several chunks, parallel): NaN first, in the middle, last.
  std::vector<float> g = normal_values(100000, 4);
  g[500] = -9.0f;
  CHECK(max_abs(g.data(), 100000) == 9.0f);
  for (const int64_t at : {int64_t{0}, int64_t{40000}, int64_t{99999}}) {
    std::vector<float> h = g;
    h[static_cast<size_t>(at)] = kNaN;
    INFO("NaN at " << at);
    CHECK(std::isnan(max_abs(h.data(), 100000)));
    std::vector<int8_t> q;
    CHECK(std::isnan(cosine_distance(quantize(h, 2.0f, 8, GradRounding::nearest, 0, 0, q))));
  }
}

namespace {

// clip_cosine_distance's sums as Note [clip search lanes] defines them,
// written out element by element.
GradQuantStats lane_order_reference(const std::vector<float>& g, float clip, int bits) {
  const int qmax = grad_qmax(bits);
  const float inv = 1.0f / (clip / static_cast<float>(qmax));
  constexpr size_t kChunk = size_t{1} << 14;
  GradQuantStats total;
  for (size_t b = 0; b < g.size(); b += kChunk) {
    double dot[8] = {}, qq[8] = {}, gg[8] = {};
    for (size_t i = b; i < std::min(g.size(), b + kChunk); ++i) {
      const size_t lane = (i - b) % 8;
      const double q = quantize_grad_value(g[i], inv, qmax, GradRounding::nearest, 0.f);
      const double x = static_cast<double>(g[i]) * static_cast<double>(inv);
      dot[lane] = std::fma(x, q, dot[lane]);
      qq[lane] = std::fma(q, q, qq[lane]);
      gg[lane] = std::fma(x, x, gg[lane]);
    }
    GradQuantStats chunk;
    for (int j = 0; j < 8; ++j) chunk.add({dot[j], qq[j], gg[j]});
    total.add(chunk);
  }
  return total;
}

}  // namespace

TEST_CASE("grad quant: every stats kernel sums in the documented lane order, bit for bit", "[quant][gradquant]") {
  std::vector<GradStatsKernel> kernels;
  for (const GradStatsKernel k : {GradStatsKernel::scalar, GradStatsKernel::avx2, GradStatsKernel::avx512})
    if (grad_stats_kernel_runs_here(k)) kernels.push_back(k);
  CAPTURE(kernels.size());
  // Long-tailed values (a different order would round differently), ties of
  // nearest rounding at s = 1 (clip 127, 8 bits), zeros of both signs, a
  // subnormal and an infinity; lengths that end every way inside the 16-wide
  // vectors, and several 2^14 chunks with a ragged end.
  std::vector<float> base = student_t(3 * 16384 + 29, 3, 21);
  const std::vector<float> special = {2.5f, -2.5f, 3.5f, 0.5f, -0.0f, 0.0f, 1e-40f, 126.5f, 127.5f, -300.0f};
  std::copy(special.begin(), special.end(), base.begin() + 5);
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{15}, int64_t{16},
                          int64_t{17}, int64_t{24}, int64_t{31}, int64_t{33}, int64_t{16384 + 13},
                          static_cast<int64_t>(base.size())}) {
    const std::vector<float> g(base.begin(), base.begin() + n);
    for (const auto& [clip, bits] : {std::pair{127.0f, 8}, std::pair{2.5f, 8}, std::pair{0.3f, 4}}) {
      const GradQuantStats want = lane_order_reference(g, clip, bits);
      for (const GradStatsKernel k : kernels) {
        INFO("n " << n << " clip " << clip << " bits " << bits << " kernel " << enum_name(k));
        CHECK(same_stats(clip_cosine_stats(g.data(), n, clip, bits, k), want));
      }
    }
  }
  // An infinity makes the sums infinite on every kernel alike.
  std::vector<float> with_inf = {1.0f, kInf, -2.0f};
  for (const GradStatsKernel k : kernels)
    CHECK(same_stats(clip_cosine_stats(with_inf.data(), 3, 2.0f, 8, k), lane_order_reference(with_inf, 2.0f, 8)));
  if (!grad_stats_kernel_runs_here(GradStatsKernel::avx512))
    CHECK_THROWS_WITH(clip_cosine_stats(base.data(), 1, 1.0f, 8, GradStatsKernel::avx512),
                      Catch::Contains("does not run on this CPU"));
}
