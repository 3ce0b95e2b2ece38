// The observers' min/max on cuda (quant/observe/minmax.cu). Its two
// per-index bodies (minmax_math.h) run here on the host over every index and
// must give the CPU reduction's results; on a GPU the kernels must too, and
// an observer folds the same range from a cuda tensor as from the CPU one.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/generator.h"
#include "quant/observe/channel_layout.h"
#include "quant/observe/histogram.h"
#include "quant/observe/minmax.h"
#include "quant/observe/minmax_math.h"
#include "tests/cuda_test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Random values with NaNs, infinities and zeros of both signs sprinkled in;
// channel `all_nan` (if >= 0 along axis 0) holds only NaN.
Tensor awkward(const Shape& shape, uint64_t seed, int64_t all_nan_row = -1) {
  Generator gen(seed);
  Tensor x = Tensor::randn(shape, gen);
  float* p = x.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; i += 37) p[i] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 5; i < n; i += 101) p[i] = (i % 2) ? kInf : -kInf;
  for (int64_t i = 11; i < n; i += 53) p[i] = (i % 2) ? 0.f : -0.f;
  if (all_nan_row >= 0) {
    const int64_t row = n / shape[0];
    for (int64_t i = 0; i < row; ++i) p[all_nan_row * row + i] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

// The two bodies run on the host, as the kernels run them.
void host_bodies(const Tensor& x, const ChannelGeometry& g, int64_t slots, std::vector<float>& mn,
                 std::vector<float>& mx) {
  const int64_t C = g.channels;
  std::vector<float> smin(C * slots), smax(C * slots);
  for (int64_t i = 0; i < C * slots; ++i)
    minmax_math::slot_min_max(x.data<float>(), g, i / slots, i % slots, slots, smin[i], smax[i]);
  mn.assign(C, 0.f);
  mx.assign(C, 0.f);
  for (int64_t c = 0; c < C; ++c) minmax_math::channel_min_max(smin.data(), smax.data(), c, slots, mn[c], mx[c]);
}

struct Case {
  Shape shape;
  bool per_channel;
  int64_t axis;
};

const std::vector<Case> kCases = {
    {{7, 5, 3, 3}, false, 0},   // per tensor
    {{9, 4, 3, 2}, true, 0},    // weights: channels outermost
    {{3, 6, 5, 4}, true, 1},    // activations: (N, C, H, W)
    {{40, 6}, true, 1},         // channels innermost
    {{1}, false, 0},            // one element
    {{6, 1000}, true, 0},       // rows longer than the slots
};

}  // namespace

TEST_CASE("observer min/max: the CUDA twin's per-index bodies give the CPU reduction's results", "[math][quant]") {
  uint64_t seed = 40;
  for (const Case& k : kCases) {
    const Tensor x = awkward(k.shape, ++seed, k.per_channel && k.axis == 0 ? 1 : -1);
    const ChannelLayout l = ChannelLayout::of(x, k.per_channel, k.axis);
    const ChannelGeometry g{l.outer, l.channels, l.inner};
    std::vector<float> want_min(l.channels), want_max(l.channels);
    reduce_minmax(x, k.per_channel, k.axis, want_min.data(), want_max.data());
    for (const int64_t slots : {int64_t{1}, int64_t{3}, int64_t{32}, slots_for(g), g.per_channel() + 5}) {
      INFO("shape " << shape_str(k.shape) << ", axis " << k.axis << ", per channel " << k.per_channel << ", slots " << slots);
      std::vector<float> mn, mx;
      host_bodies(x, g, slots, mn, mx);
      for (int64_t c = 0; c < l.channels; ++c) {
        INFO("channel " << c);
        CHECK(mn[c] == want_min[c]);  // == : exact, and -0 == +0 (the one thing the order may change)
        CHECK(mx[c] == want_max[c]);
      }
    }
  }
  // The all-NaN channel of the weight case is left unset (+inf / -inf), as on the CPU.
  const Tensor w = awkward({4, 10}, 3, 2);
  std::vector<float> mn, mx;
  host_bodies(w, {1, 4, 10}, 3, mn, mx);
  CHECK(mn[2] == kInf);
  CHECK(mx[2] == -kInf);
}

TEST_CASE("observer min/max on cuda: the kernels and an observer's fold equal the CPU's", "[cuda][quant]") {
  if (!testing::cuda_device_or_skip()) return;
  uint64_t seed = 70;
  for (const Case& k : kCases) {
    INFO("shape " << shape_str(k.shape) << ", axis " << k.axis << ", per channel " << k.per_channel);
    const Tensor x = awkward(k.shape, ++seed);
    const int64_t C = k.per_channel ? k.shape[k.axis] : 1;
    std::vector<float> cmin(C), cmax(C), dmin(C), dmax(C);
    reduce_minmax(x, k.per_channel, k.axis, cmin.data(), cmax.data());
    reduce_minmax(x.to(Device::cuda), k.per_channel, k.axis, dmin.data(), dmax.data());
    CHECK(dmin == cmin);
    CHECK(dmax == cmax);
  }
  QuantSpec spec;
  spec.per_channel = true;
  spec.axis = 1;
  MovingAverageMinMaxObserver on_cpu(spec, 6), on_gpu(spec, 6);
  Generator gen(90);
  for (int step = 0; step < 3; ++step) {
    // Finite values: an infinite range would average to NaN on both sides.
    const Tensor x = Tensor::randn({3, 6, 5, 4}, gen);
    on_cpu.observe(x);
    on_gpu.observe(x.to(Device::cuda));
  }
  CHECK(on_gpu.min_val().to_vector() == on_cpu.min_val().to_vector());
  CHECK(on_gpu.max_val().to_vector() == on_cpu.max_val().to_vector());
}

TEST_CASE("an observer that runs on the CPU only refuses a cuda tensor naming itself", "[cuda][quant]") {
  HistogramObserver hist{QuantSpec{}};
  testing::CudaOrLabelled x(Tensor::ones({2, 3}));
  CHECK_THROWS_WITH(hist.observe(x.t), Catch::Matchers::Contains("observer " + hist.describe() +
                                                                 ": the input (shape [2, 3]) is on cuda, but this "
                                                                 "observer runs on the CPU only"));
}
