// INT8 training's gradient-quantization kernels (quant/int8_training/grad_rows.h):
// every kernel this CPU runs gives, bit for bit, the integers and sums of the
// element-by-element definitions (quantize_grad_value with sr_uniform_mixed,
// add_grad_stats in each item's order).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/enum_names.h"
#include "core/generator.h"
#include "quant/int8_training/grad_rows.h"
#include "quant/int8_training/int8_math.h"

using namespace qat;
using namespace qat::quant;

namespace {

std::vector<GradStatsKernel> kernels_here() {
  std::vector<GradStatsKernel> ks;
  for (const GradStatsKernel k : {GradStatsKernel::scalar, GradStatsKernel::avx2, GradStatsKernel::avx512})
    if (grad_stats_kernel_runs_here(k)) ks.push_back(k);
  return ks;
}

// Normal values times 40 (some beyond the clip), with NaN, infinities, signed
// zeros, exact halves (ties) and huge values spliced in.
std::vector<float> gradient_values(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = 40.f * gen.normal();
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), -0.0f, 0.0f, 2.5f, -3.5f, 0.5f, 1e30f, -1e-30f};
  for (size_t i = 0; i < std::size(special) && 3 * i < v.size(); ++i) v[3 * i] = special[i];
  return v;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

}  // namespace

TEST_CASE("grad rows: quantize_run equals quantize_grad_value element by element on every kernel",
          "[quant][int8train][gradquant]") {
  const float inv = 1.0f / (60.0f / 127.0f);
  const uint64_t key = mix64(12345);
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{33}, int64_t{1000}}) {
    const std::vector<float> v = gradient_values(n, 7 + static_cast<uint64_t>(n));
    // index0 near 2^64: the noise index wraps as the scalar one does.
    for (const uint64_t index0 : {uint64_t{0}, uint64_t{123456789}, ~uint64_t{0} - 20}) {
      for (const GradRounding r : {GradRounding::stochastic, GradRounding::nearest}) {
        std::vector<int8_t> want(static_cast<size_t>(n));
        int64_t want_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const float u = r == GradRounding::stochastic ? sr_uniform_mixed(key, index0 + static_cast<uint64_t>(i)) : 0.f;
          want[static_cast<size_t>(i)] = quantize_grad_value(v[static_cast<size_t>(i)], inv, 127, r, u);
          want_sum += want[static_cast<size_t>(i)];
        }
        for (const GradStatsKernel k : kernels_here()) {
          INFO("n " << n << " index0 " << index0 << " " << enum_name(r) << " kernel " << enum_name(k));
          std::vector<int8_t> q(static_cast<size_t>(n) + 1, int8_t{99});
          std::vector<float> qf(static_cast<size_t>(n) + 1, 99.f);
          CHECK(quantize_run(k, v.data(), n, inv, 127, r, key, index0, q.data(), qf.data()) == want_sum);
          CHECK(std::vector<int8_t>(q.begin(), q.begin() + n) == want);
          CHECK(q.back() == 99);  // nothing written past n
          CHECK(qf.back() == 99.f);
          bool floats_match = true;
          for (int64_t i = 0; i < n; ++i) {
            const float expect = want[static_cast<size_t>(i)];  // +0 for a zero integer
            floats_match &= std::memcmp(&qf[static_cast<size_t>(i)], &expect, sizeof expect) == 0;
          }
          CHECK(floats_match);
        }
      }
    }
  }
}

// Values placed against their own noise draw u: x = m - u (the sum exactly
// the integer m) and the floats on either side of it, the sum a hair below
// or above m, for m across the grid and for tiny and huge magnitudes. A
// rounding to nearest of x + u would round some sums below m up to m.
TEST_CASE("grad rows: stochastic rounding holds floor(x + u) where x + u is a hair from an integer",
          "[quant][int8train][gradquant]") {
  const uint64_t key = mix64(77), index0 = 1000;
  std::vector<float> v;
  for (int64_t m = -130; m <= 130; m += 1)
    for (int side = -2; side <= 2; ++side) {
      const float u = sr_uniform_mixed(key, index0 + v.size());
      float x = static_cast<float>(m) - u;  // exact: u = k 2^-24 and |m| < 2^8
      for (int s = 0; s < std::abs(side); ++s) x = std::nextafter(x, side < 0 ? -INFINITY : INFINITY);
      v.push_back(x);
    }
  for (const float mag : {1e-45f, 1e-38f, 3e-8f, 5.9604645e-8f, 8388607.5f, 16777216.f, 1e30f})
    for (const float sign : {1.f, -1.f}) v.push_back(sign * mag);
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<int8_t> want(v.size());
  for (int64_t i = 0; i < n; ++i)
    want[static_cast<size_t>(i)] = quantize_grad_value(v[static_cast<size_t>(i)], 1.f, 127, GradRounding::stochastic,
                                                       sr_uniform_mixed(key, index0 + static_cast<uint64_t>(i)));
  for (const GradStatsKernel k : kernels_here()) {
    INFO("kernel " << enum_name(k));
    std::vector<int8_t> q(v.size());
    std::vector<float> qf(v.size());
    quantize_run(k, v.data(), n, 1.f, 127, GradRounding::stochastic, key, index0, q.data(), qf.data());
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += q[static_cast<size_t>(i)] != want[static_cast<size_t>(i)];
    CHECK(differ == 0);
  }
}

TEST_CASE("grad rows: chunk_stats sums each item in its order on every kernel", "[quant][int8train][gradquant]") {
  const int64_t total = 20000;
  const std::vector<float> v = gradient_values(total, 3);
  std::vector<float> qf(static_cast<size_t>(total));
  std::vector<int8_t> q(static_cast<size_t>(total));
  quantize_run(GradStatsKernel::scalar, v.data(), total, 0.5f, 127, GradRounding::stochastic, mix64(9), 0, q.data(),
               qf.data());
  // Items of unequal lengths (0, short, a full chunk, ragged), overlapping,
  // 1 to 19 of them: partly filled groups of eight lanes.
  std::vector<int64_t> start, len;
  for (int64_t i = 0; i < 19; ++i) {
    start.push_back((i * 997) % (total - int8_math::kSumChunk));
    len.push_back(i == 3 ? 0 : (i == 5 ? int8_math::kSumChunk : 1 + (i * 389) % int8_math::kSumChunk));
  }
  for (int64_t items = 1; items <= 19; items += 6) {
    std::vector<GradQuantStats> want(static_cast<size_t>(items));
    for (int64_t i = 0; i < items; ++i)
      for (int64_t t = start[static_cast<size_t>(i)]; t < start[static_cast<size_t>(i)] + len[static_cast<size_t>(i)]; ++t)
        int8_math::add_grad_stats(&want[static_cast<size_t>(i)].dot, &want[static_cast<size_t>(i)].qq,
                                  &want[static_cast<size_t>(i)].gg, v[static_cast<size_t>(t)], q[static_cast<size_t>(t)]);
    for (const GradStatsKernel k : kernels_here()) {
      std::vector<GradQuantStats> got(static_cast<size_t>(items));
      chunk_stats(k, v.data(), qf.data(), start.data(), len.data(), items, got.data());
      for (int64_t i = 0; i < items; ++i) {
        INFO("items " << items << " item " << i << " kernel " << enum_name(k));
        const GradQuantStats& a = got[static_cast<size_t>(i)];
        const GradQuantStats& b = want[static_cast<size_t>(i)];
        CHECK((same_bits(a.dot, b.dot) && same_bits(a.qq, b.qq) && same_bits(a.gg, b.gg)));
      }
    }
  }
  if (!grad_stats_kernel_runs_here(GradStatsKernel::avx512)) {
    float x = 0;
    int8_t y = 0;
    CHECK_THROWS_WITH(quantize_run(GradStatsKernel::avx512, &x, 1, 1.f, 127, GradRounding::nearest, 0, 0, &y, &x),
                      Catch::Contains("does not run on this CPU"));
  }
}

TEST_CASE("grad rows: scaled_transpose turns (O, P) planes into scaled (P, O) rows on every kernel",
          "[quant][int8train][gradquant]") {
  // Whole 16 x 16 blocks, ragged edges on either side or both, fewer than 16 of either.
  for (const auto& [O, P] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 16}, {64, 1024}, {512, 16}, {40, 37}, {17, 100}, {32, 4}, {3, 5}, {48, 80}}) {
    const std::vector<float> src = gradient_values(O * P, static_cast<uint64_t>(O * 1000 + P));
    const std::vector<float> scale = gradient_values(O, 5);
    std::vector<float> want(static_cast<size_t>(O * P));
    for (int64_t o = 0; o < O; ++o)
      for (int64_t p = 0; p < P; ++p)
        want[static_cast<size_t>(p * O + o)] = src[static_cast<size_t>(o * P + p)] * scale[static_cast<size_t>(o)];
    for (const GradStatsKernel k : kernels_here()) {
      INFO("O " << O << " P " << P << " kernel " << enum_name(k));
      std::vector<float> got(static_cast<size_t>(O * P) + 1, 99.f);
      scaled_transpose(k, src.data(), O, P, scale.data(), got.data());
      bool same = true;
      for (size_t i = 0; i < want.size(); ++i) same &= same_bits(got[i], want[i]);
      CHECK(same);
      CHECK(got.back() == 99.f);  // nothing written past the rows
    }
  }
}
