// Post-training calibrators (quant/observe/calibrators.h) and the histogram
// they read (histogram.h). The percentile, MSE and entropy searches are
// checked against an independent numpy reference written from the published
// algorithms (tests/golden/gen_calibration.py): the chosen bin counts must be
// equal. The histogram's growth and merge must keep every count.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/safetensors.h"
#include "quant/observe/calibrators.h"
#include "quant/observe/histogram.h"

namespace {

using namespace qat;
using namespace qat::quant;

std::vector<uint64_t> golden_counts(const testing::GoldenCase& c) {
  std::vector<uint64_t> out;
  for (float v : c.get("hist").to_vector()) out.push_back(static_cast<uint64_t>(v));
  return out;
}

int64_t golden_bins(const testing::GoldenCase& c, const std::string& key) {
  return testing::int_values(c.get(key)).at(0);
}

uint64_t sum_of(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t{0}); }

QuantSpec tensorrt_activation() {
  QuantSpec s;
  s.bits = 8;
  s.is_signed = true;
  s.symmetric = true;
  s.formula = ScaleFormula::amax_over_qmax;  // configs/backends/tensorrt.yaml
  return s;
}

}  // namespace

TEST_CASE("calibrators choose the thresholds of the numpy reference", "[quant][calibration][golden]") {
  const SafetensorsFile& f = testing::golden_file("calibration.safetensors");
  const auto cases = testing::golden_case_names(f, "", ".hist");
  REQUIRE(cases.size() == 6);
  for (const std::string& name : cases) {
    INFO("case " << name);
    const testing::GoldenCase c(f, name);
    const std::vector<uint64_t> counts = golden_counts(c);
    REQUIRE(counts.size() == 2048);
    CHECK(entropy_bins(counts, 128, 128) == golden_bins(c, "entropy128"));
    CHECK(entropy_bins(counts, 8, 128) == golden_bins(c, "entropy8"));
    CHECK(entropy_bins(counts, 256, 256) == golden_bins(c, "entropy256"));
    CHECK(percentile_bins(counts, 99.99) == golden_bins(c, "pct9999"));
    CHECK(percentile_bins(counts, 99.9) == golden_bins(c, "pct999"));
    CHECK(mse_bins(counts, 127) == golden_bins(c, "mse127"));
    CHECK(mse_bins(counts, 7) == golden_bins(c, "mse7"));
  }
}

TEST_CASE("calibrators on known distributions", "[quant][calibration]") {
  SECTION("a point mass: percentile and MSE keep exactly its bin; every entropy candidate ties, the first wins") {
    std::vector<uint64_t> counts(2048, 0);
    counts[99] = 1000;
    CHECK(percentile_bins(counts, 99.99) == 100);
    CHECK(percentile_bins(counts, 0.001) == 100);
    CHECK(mse_bins(counts, 127) == 100);
    CHECK(entropy_bins(counts, 128, 128) == 128);
  }
  SECTION("uniform counts: the percentile is the share of the bins") {
    std::vector<uint64_t> counts(2048, 7);
    CHECK(percentile_bins(counts, 50.0) == 1024);
    CHECK(percentile_bins(counts, 100.0) == 2048);
    CHECK(percentile_bins(counts, 25.0) == 512);
  }
  SECTION("uniform counts: MSE balances rounding against clipping") {
    // Continuous optimum of T^3 / (12 L^2 R) + (R - T)^3 / (3 R): T = R 2L / (2L + 1).
    std::vector<uint64_t> counts(2048, 5);
    for (int64_t L : {7, 15, 127}) {
      const double t = 2048.0 * 2 * L / (2 * L + 1);
      INFO("L = " << L << ", continuous optimum " << t << " bins");
      CHECK(std::abs(static_cast<double>(mse_bins(counts, L)) - t) <= 1.0);
    }
  }
  SECTION("a few far outliers: the percentile clips them, max keeps them") {
    // (The entropy search on long tails is the golden's long_tail case. With a
    // handful of outliers it keeps them: every candidate whose last kept bin
    // is empty has KL = inf, and the bulk ends below the first candidate.)
    AbsHistogram h;
    std::vector<float> x(100000);
    Generator g(3);
    for (auto& v : x) v = g.normal();
    for (int k = 0; k < 5; ++k) x[static_cast<size_t>(17 * k)] = 40.f + 10.f * static_cast<float>(k);
    h.add(x.data(), static_cast<int64_t>(x.size()), 80.f, "test");
    CHECK(choose_threshold(h, Calibrator::max, {}, 127) == 80.f);
    const float t = choose_threshold(h, Calibrator::percentile, {}, 127);
    CHECK(t > 3.f);  // the bulk of a standard normal, not the outliers
    CHECK(t < 5.f);
    // exactly the end of the percentile's bin
    const int64_t i = percentile_bins(h.counts(), 99.99);
    CHECK(t == static_cast<float>(static_cast<double>(h.range()) * static_cast<double>(i) /
                                  static_cast<double>(h.bins())));
  }
}

TEST_CASE("the histogram keeps every count when its range grows", "[quant][calibration]") {
  AbsHistogram h(2048);
  std::vector<float> a(10000);
  Generator g(5);
  for (auto& v : a) v = g.uniform(-1.f, 1.f);
  a[0] = 1.f;
  h.add(a.data(), static_cast<int64_t>(a.size()), 1.f, "a");
  REQUIRE(h.range() == 1.f);
  const std::vector<uint64_t> before = h.counts();
  // max 2.5: the range grows by k = 3, every 3 old bins into one new bin.
  const float b[] = {2.5f, std::nanf(""), 0.f};
  h.add(b, 3, 2.5f, "b");
  CHECK(h.range() == 3.f);
  CHECK(h.amax() == 2.5f);
  // A threshold past the largest value seen is capped at it: the 100th
  // percentile ends in a bin reaching beyond 2.5.
  CHECK(choose_threshold(h, Calibrator::percentile, {100.0}, 127) == 2.5f);
  CHECK(h.total() == 10002);  // the NaN is not counted
  std::vector<uint64_t> expect(2048, 0);
  for (size_t j = 0; j < before.size(); ++j) expect[j / 3] += before[j];
  expect[static_cast<size_t>(2.5 / 3.0 * 2048)] += 1;
  expect[0] += 1;
  CHECK(h.counts() == expect);
  CHECK(sum_of(h.counts()) == h.total());
}

TEST_CASE("entropy and MSE leave exact zeros out, percentile counts them", "[quant][calibration][golden]") {
  // relu_nonzero is relu_spike without its exact zeros: a histogram of the
  // spike's samples must search as the reference did on relu_nonzero.
  const SafetensorsFile& f = testing::golden_file("calibration.safetensors");
  const testing::GoldenCase spike(f, "relu_spike"), nonzero(f, "relu_nonzero");
  std::vector<uint64_t> counts = golden_counts(spike);
  const std::vector<uint64_t> without = golden_counts(nonzero);
  const uint64_t zeros = counts[0] - without[0];
  REQUIRE(zeros > 400000);
  for (size_t j = 1; j < counts.size(); ++j) REQUIRE(counts[j] == without[j]);
  // Rebuild it as AbsHistogram would hold it: the zeros as values, the rest at bin centres.
  const float R = spike.get("range").data<float>()[0];
  std::vector<float> values(static_cast<size_t>(zeros), 0.f);
  for (size_t j = 0; j < without.size(); ++j)
    values.insert(values.end(), without[j], (static_cast<float>(j) + 0.5f) * R / 2048.f);
  values.back() = R;  // the top bin's value at R itself, so the range is R
  AbsHistogram h;
  h.add(values.data(), static_cast<int64_t>(values.size()), R, "relu");
  REQUIRE(h.counts() == counts);
  CHECK(h.zeros() == zeros);
  const double w = static_cast<double>(R) / 2048;
  CHECK(choose_threshold(h, Calibrator::entropy, {}, 127) == static_cast<float>(w * golden_bins(nonzero, "entropy128")));
  CHECK(choose_threshold(h, Calibrator::entropy, {}, 255) == static_cast<float>(w * golden_bins(nonzero, "entropy256")));
  CHECK(choose_threshold(h, Calibrator::mse, {}, 127) == static_cast<float>(w * golden_bins(nonzero, "mse127")));
  CHECK(choose_threshold(h, Calibrator::percentile, {}, 127) == static_cast<float>(w * golden_bins(spike, "pct9999")));
}

TEST_CASE("a histogram of only zeros takes the range of the first non-zero tensor", "[quant][calibration]") {
  AbsHistogram h(16);
  const float z[] = {0.f, -0.f, 0.f};
  h.add(z, 3, 0.f, "zeros");
  CHECK(h.range() == 0.f);
  CHECK(choose_threshold(h, Calibrator::entropy, {}, 127) == 0.f);
  const float v[] = {4.f, 1.f};
  h.add(v, 2, 4.f, "v");
  CHECK(h.range() == 4.f);
  std::vector<uint64_t> expect(16, 0);
  expect[0] = 3, expect[4] = 1, expect[15] = 1;
  CHECK(h.counts() == expect);
}

TEST_CASE("a histogram started on a tiny range grows without losing a count", "[quant][calibration]") {
  AbsHistogram h(2048);
  const float tiny[] = {1e-37f, 5e-38f, 0.f};
  h.add(tiny, 3, 1e-37f, "tiny");
  // bins of a tiny range where they belong (2048 / 1e-37 overflows float)
  CHECK(h.counts()[2047] == 1);
  CHECK(h.counts()[1024] == 1);
  CHECK(h.counts()[0] == 1);
  const float big[] = {1.f, 0.5f};
  h.add(big, 2, 1.f, "big");  // ratio 1e37: every old bin into bin 0
  CHECK(h.range() == 1.f);
  CHECK(h.total() == 5);
  CHECK(h.counts()[0] == 3);
  CHECK(h.counts()[1024] == 1);
  CHECK(h.counts()[2047] == 1);
}

// Note [two calibration passes]: a first pass ranges, the second fills a
// histogram over [0, absmax] of all the batches, whatever their order; one
// pass grows the range as the batches come and depends on their order.
TEST_CASE("a ranging pass first: the histogram spans [0, absmax] whatever the order of the batches",
          "[quant][calibration]") {
  Generator g(4);
  std::vector<Tensor> batches;  // 8 batches of ReLU'd standard normals
  for (int k = 0; k < 8; ++k) {
    Tensor x = Tensor::empty({100000});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::max(0.f, g.normal());
    batches.push_back(x);
  }
  float amax = 0;
  int widest = 0;
  for (int k = 0; k < 8; ++k)
    for (int64_t i = 0; i < batches[k].numel(); ++i)
      if (batches[k].data<float>()[i] > amax) amax = batches[k].data<float>()[i], widest = k;
  std::vector<int> widest_last, widest_first = {widest};
  for (int k = 0; k < 8; ++k)
    if (k != widest) widest_last.push_back(k), widest_first.push_back(k);
  widest_last.push_back(widest);
  QuantSpec spec = tensorrt_activation();
  AbsHistogram whole(2048);  // one histogram over [0, absmax] of everything
  whole.start_at(amax);
  for (const Tensor& b : batches) whole.add(b.data<float>(), b.numel(), amax, "whole");
  REQUIRE(whole.range() == amax);
  auto calibrated = [&](const std::vector<int>& order, bool two_passes) {
    auto obs = std::make_unique<HistogramObserver>(spec, Calibrator::entropy);
    if (two_passes) {
      obs->set_ranging(true);
      for (int k : order) obs->observe(batches[static_cast<size_t>(k)]);
      CHECK(obs->histogram().empty());
      obs->begin_histogram();
    }
    for (int k : order) obs->observe(batches[static_cast<size_t>(k)]);
    return obs;
  };
  const auto forward = calibrated(widest_last, true), backward = calibrated(widest_first, true);
  CHECK(forward->histogram().range() == amax);
  CHECK(forward->histogram().counts() == whole.counts());
  CHECK(backward->histogram().counts() == whole.counts());
  const float t = choose_threshold(whole, Calibrator::entropy, {}, 127);
  CHECK(forward->threshold() == t);
  CHECK(backward->threshold() == t);
  // One pass: unless the batch holding the max comes first, the range grows
  // (k = 2: about twice the max) with half the bins left unused, and the
  // entropy threshold moves, here to no clipping at all.
  const auto grown = calibrated(widest_last, false), max_first = calibrated(widest_first, false);
  CHECK(grown->histogram().range() > 1.5f * amax);
  CHECK(max_first->histogram().range() == amax);
  CHECK(max_first->threshold() == t);
  CHECK(grown->threshold() > 1.03f * t);
  // Misuse is named.
  REQUIRE_THROWS_WITH(grown->begin_histogram(), Catch::Contains("without a ranging pass"));
  REQUIRE_THROWS_WITH(grown->set_ranging(true), Catch::Contains("after the histogram was filled"));
  AbsHistogram started(16);
  started.add(batches[0].data<float>(), 4, amax, "b");
  REQUIRE_THROWS_WITH(started.start_at(1.f), Catch::Contains("after values were added"));
  // A second pass a hair above the first's max keeps the range; a clearly larger max grows it.
  AbsHistogram preset(16);
  preset.start_at(4.f);
  const float hair[] = {4.00003f, 1.f};
  preset.add(hair, 2, 4.00003f, "hair");
  CHECK(preset.range() == 4.f);
  CHECK(preset.counts()[15] == 1);
  CHECK(preset.counts()[4] == 1);
  const float more[] = {4.1f};
  preset.add(more, 1, 4.1f, "more");
  CHECK(preset.range() == 8.f);
}

TEST_CASE("merging histograms keeps every count", "[quant][calibration]") {
  Generator g(9);
  auto filled = [&](float scale, int n) {
    AbsHistogram h(2048);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = scale * g.normal();
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    h.add(x.data(), n, amax, "x");
    return h;
  };
  SECTION("same range: the counts add bin by bin") {
    AbsHistogram a(2048), b(2048);
    std::vector<float> x(5000), y(7000);
    for (auto& v : x) v = g.uniform(-2.f, 2.f);
    for (auto& v : y) v = g.uniform(-2.f, 2.f);
    x[0] = y[0] = 2.f;
    a.add(x.data(), 5000, 2.f, "x");
    b.add(y.data(), 7000, 2.f, "y");
    std::vector<uint64_t> expect = a.counts();
    for (size_t j = 0; j < expect.size(); ++j) expect[j] += b.counts()[j];
    a.merge(b);
    CHECK(a.counts() == expect);
    CHECK(a.total() == 12000);
  }
  SECTION("different ranges, either way round") {
    AbsHistogram a = filled(1.f, 20000), b = filled(7.f, 30000);
    AbsHistogram a2 = a;
    a.merge(b);
    CHECK(a.total() == 50000);
    CHECK(sum_of(a.counts()) == 50000);
    CHECK(a.range() >= b.range());
    CHECK(a.amax() == b.amax());
    b.merge(a2);
    CHECK(sum_of(b.counts()) == 50000);
  }
}

TEST_CASE("an infinity in a calibrated tensor is an error naming it", "[quant][calibration]") {
  AbsHistogram h;
  const float x[] = {1.f, std::numeric_limits<float>::infinity()};
  REQUIRE_THROWS_WITH(h.add(x, 2, std::numeric_limits<float>::infinity(), "features.3.output_quant"),
                      Catch::Contains("features.3.output_quant") && Catch::Contains("infinity"));
}

TEST_CASE("TensorRT's scale: amax / 127, the cache's value applied bit for bit", "[quant][calibration]") {
  const QuantSpec trt = tensorrt_activation();
  HistogramObserver obs(trt, Calibrator::max);
  Generator g(11);
  Tensor x = Tensor::empty({4, 1000});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.normal();
  x.data<float>()[5] = -6.3f;
  obs.observe(x);
  const QParams q = obs.qparams();
  CHECK(q.scale.data<float>()[0] == 6.3f / 127.0f);
  CHECK(q.zero_point.data<int32_t>()[0] == 0);
  CHECK(trt.qmin() == -128);  // TensorRT clamps activations to [-128, 127]
  float s;
  int32_t z;
  qparams_from_range(trt, -2.f, 6.3f, s, z);  // the formula itself, from an observed range
  CHECK(s == 6.3f / 127.0f);
  CHECK(z == 0);
  // Any scale a cache holds comes back unchanged on TensorRT's grid, and a
  // threshold's trip through the cache gives the scale TensorRT computes.
  for (int k = 0; k < 2000; ++k) {
    const float c = g.uniform(1e-4f, 1.f);
    REQUIRE(qparams_for_cache_scale(trt, c, 0.f, 0.f).scale.data<float>()[0] == c);
    const float t = g.uniform(1e-3f, 100.f);
    REQUIRE(qparams_for_cache_scale(trt, cache_scale(t), -t, t).scale.data<float>()[0] == t / 127.0f);
  }
}

TEST_CASE("the histogram observer clips an affine grid to the threshold on both sides", "[quant][calibration]") {
  QuantSpec u8;  // uint8 affine (the default backend's activations)
  u8.is_signed = false;
  u8.symmetric = false;
  HistogramObserver obs(u8, Calibrator::percentile, {75.0, 128});
  Tensor x = Tensor::empty({2048});
  for (int64_t i = 0; i < 2048; ++i) x.data<float>()[i] = static_cast<float>(i) / 2047.f * 8.f - 2.f;  // [-2, 6]
  obs.observe(x);
  // |x| has density 2 on [0, 2] and 1 on [2, 6]: 75% of it lies below 4.
  const float t = obs.threshold();
  CHECK(t > 3.99f);
  CHECK(t < 4.01f);
  const QParams q = obs.qparams();
  float s;
  int32_t z;
  qparams_from_range(u8, -2.f, cache_scale(t) * 127.f, s, z);
  CHECK(q.scale.data<float>()[0] == s);
  CHECK(q.zero_point.data<int32_t>()[0] == z);
  CHECK(positive_levels(u8, -2.f, 6.f) == 127);
  CHECK(positive_levels(u8, 0.f, 6.f) == 255);
  // data <= 0 on an affine grid: [-T, 0] in 255 steps, as qparams_for_cache_scale builds it (it was taken as 127)
  CHECK(positive_levels(u8, -6.f, -1.f) == 255);
  CHECK(positive_levels(u8, -6.f, 0.f) == 255);
  const QParams neg = qparams_for_cache_scale(u8, cache_scale(6.f), -6.f, -1.f);
  CHECK(neg.scale.data<float>()[0] == 6.f / 255.f);
  CHECK(neg.zero_point.data<int32_t>()[0] == 255);
}

// Values worked by hand: the growth factor is the ceiling of the ratio of
// ranges (2.2 / 1 -> 3, where rounding gives 2 and 2.2 would not fit), and a
// merged bin lands where its centre falls on the new grid.
TEST_CASE("histogram growth and merge place counts where the hand calculation does", "[quant][calibration]") {
  AbsHistogram grown(2048);
  const float a[] = {1.f, 0.5f};
  grown.add(a, 2, 1.f, "a");
  const float b[] = {2.2f};
  grown.add(b, 1, 2.2f, "b");
  CHECK(grown.range() == 3.f);
  CHECK(grown.counts()[static_cast<size_t>(2.2 / 3.0 * 2048)] == 1);

  AbsHistogram x(4), y(4);
  const float xs[] = {2.f};  // range 2, bins of 0.5: 2.0 in bin 3
  x.add(xs, 1, 2.f, "x");
  const float ys[] = {0.8f, 3.f};  // range 3, bins of 0.75: bin 1 (centre 1.125) and bin 3 (centre 2.625)
  y.add(ys, 2, 3.f, "y");
  x.merge(y);  // range 4 (2 x 2), bins of 1: x's bin 3 -> bin 1; y's centres 1.125 -> 1, 2.625 -> 2
  REQUIRE(x.range() == 4.f);
  CHECK(x.counts() == std::vector<uint64_t>{0, 2, 1, 0});
}
