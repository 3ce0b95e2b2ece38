// INT8 training's device twin (quant/int8_training/int8_device.h): its code run on the
// host by the emulating executor (tests/host_exec.h), against the CPU op bit
// for bit over several steps (forward, the three gradients, the integers G
// and Gx, the quantizers' clips, distances and learning-rate scale); then the
// CUDA twin against the CPU where there is a GPU.
#include <limits>
#include <random>

#include "tests/cuda_test_util.h"
#include "tests/host_exec.h"
#include "tests/test_util.h"

#include "core/autograd.h"
#include "core/ops.h"
#include "quant/int8_training/int8_device.h"
#include "quant/int8_training/int8_ops.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

// x on the grid x = s (u - zero), u in [0, levels).
Tensor on_grid(const Shape& shape, const ActGrid& grid, Generator& g) {
  Tensor x = Tensor::empty(shape);
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] =
        static_cast<float>(grid.scale * (static_cast<double>(g.below(static_cast<uint64_t>(grid.levels))) - grid.zero));
  return x;
}

// wq = s_w[o] W, W in [-128, 127]; `scales` per channel or one.
Tensor int8_weight(const Shape& shape, const Tensor& scales, Generator& g) {
  Tensor wq = Tensor::empty(shape);
  const int64_t O = shape[0], K = wq.numel() / O;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k)
      wq.data<float>()[o * K + k] = scales.data<float>()[scales.numel() == 1 ? 0 : o] *
                                    static_cast<float>(static_cast<int64_t>(g.below(256)) - 128);
  return wq;
}

// Both undefined, or the same bits (testing::same_bits; the steps' tensors are on the host).
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || testing::same_bits(a, b));
}

struct Case {
  const char* name;
  Shape x, w;  // a 2-d x: a linear layer
  Conv2dParams p;
  ActGrid grid;
  bool per_channel, bias, input_grad;
  Int8GradConfig cfg;
  bool weight_grad = true;
  int zero_grad_step = -1;  // the step whose output gradient is all zeros (none: -1)
};

Int8GradConfig config(GradRounding r, GradClipping c, int bits = 8) {
  Int8GradConfig cfg;
  cfg.rounding = r;
  cfg.clipping = c;
  cfg.bits = bits;
  cfg.period = 2;  // searched on steps 0 and 2, tracked on 1
  return cfg;
}

// The layer through `run` (the CPU op, or the twin on some executor) on
// `device`, for three steps on the same inputs and output gradients;
// everything it produced per step, on the host.
struct Step {
  Tensor y, dx, dw, db;
  std::vector<int8_t> G, Gx;
  float clip_dw, clip_dx, distance_dw, distance_dx, lr_scale;
};
template <class Run>
std::vector<Step> three_steps(const Case& c, Device device, Run run) {
  Generator g(21);
  const Tensor scales = c.per_channel ? Tensor::uniform({c.w[0]}, g, 0.005f, 0.02f) : Tensor::full({1}, 0.01f);
  const Tensor x0 = on_grid(c.x, c.grid, g), w0 = int8_weight(c.w, scales, g);
  const Tensor b0 = Tensor::randn({c.w[0]}, g);
  auto st = std::make_shared<Int8GradState>(c.cfg, 7, "layer");
  st->keep_last = true;
  auto host = [](const Tensor& t) { return t.defined() ? t.to(Device::cpu) : Tensor(); };
  std::vector<Step> out;
  for (int step = 0; step < 3; ++step) {
    Tensor x = x0.to(device).clone().set_requires_grad(c.input_grad);
    Tensor w = w0.to(device).clone().set_requires_grad(c.weight_grad);
    Tensor b = c.bias ? b0.to(device).clone().set_requires_grad(true) : Tensor();
    Tensor y = run(x, w, scales, b, st);  // the scales stay on the host, as a quantizer's
    REQUIRE(y.device() == device);
    Tensor gy = Tensor::randn(y.sizes(), g);  // (the same draws on every run)
    if (step == c.zero_grad_step) gy = Tensor::zeros(y.sizes());
    gy = gy.to(device);
    sum(mul(y, gy)).backward();
    out.push_back({host(y.detach()), c.input_grad ? host(x.grad()) : Tensor(), c.weight_grad ? host(w.grad()) : Tensor(),
                   c.bias ? host(b.grad()) : Tensor(), st->last_g, st->last_gx, st->clip(0), st->clip(1),
                   st->distance(0), st->distance(1), st->lr_scale()});
  }
  return out;
}

// The CPU op of the case.
Tensor cpu_op(const Case& c, const Tensor& x, const Tensor& w, const Tensor& s, const Tensor& b,
              const std::shared_ptr<Int8GradState>& st) {
  return c.x.size() == 2 ? int8_linear(x, c.grid, w, s, b, st) : int8_conv2d(x, c.grid, w, s, b, c.p, st);
}

int8_math::Geometry geometry(const Case& c) {
  if (c.x.size() == 2) return {c.x[0], c.x[1], 1, 1, c.w[0], 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
  const auto& p = c.p;
  const int64_t oh = conv_out_size(c.x[2], c.w[2], p.stride_h, p.pad_h, p.dil_h, "test");
  const int64_t ow = conv_out_size(c.x[3], c.w[3], p.stride_w, p.pad_w, p.dil_w, "test");
  return {c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], c.w[2], c.w[3], oh, ow,
          p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dil_h, p.dil_w, p.groups};
}

// The twin on the host executor (the CUDA twin's code, int8_device.h).
Tensor emulated_op(const Case& c, const Tensor& x, const Tensor& w, const Tensor& s, const Tensor& b,
                   const std::shared_ptr<Int8GradState>& st) {
  testing::HostExec ex;
  Tensor y = int8_device::int8_layer(ex, x, c.grid, w, s, b, geometry(c), st);
  return c.x.size() == 2 ? reshape(y, {c.x[0], c.w[0]}) : y;
}

void require_same_steps(const std::vector<Step>& got, const std::vector<Step>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i);
    CHECK(same_bits(got[i].y, want[i].y));
    CHECK(same_bits(got[i].dx, want[i].dx));
    CHECK(same_bits(got[i].dw, want[i].dw));
    CHECK(same_bits(got[i].db, want[i].db));
    CHECK(got[i].G == want[i].G);
    CHECK(got[i].Gx == want[i].Gx);
    CHECK(got[i].clip_dw == want[i].clip_dw);
    CHECK(got[i].clip_dx == want[i].clip_dx);
    CHECK(got[i].distance_dw == want[i].distance_dw);
    CHECK(got[i].distance_dx == want[i].distance_dx);
    CHECK(got[i].lr_scale == want[i].lr_scale);
  }
}

std::vector<Case> cases() {
  using enum GradRounding;
  using enum GradClipping;
  const ActGrid u8{0.05f, 3.0, 256}, centred{0.02f, 128.0, 256}, frac{0.03f, 2.4, 16};
  return {
      {"conv 3x3, padding 1, per-channel weights, bias", {2, 3, 7, 6}, {5, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, u8,
       true, true, true, config(stochastic, direction_sensitive)},
      {"conv 11x11 stride 4 padding 2 (AlexNet's conv1), no input gradient", {2, 3, 23, 23}, {4, 3, 11, 11},
       {4, 4, 2, 2, 1, 1, 1}, u8, true, true, false, config(stochastic, direction_sensitive)},
      {"conv stride 2x1, dilation 2, per-tensor weight, no bias, nearest rounding, max clipping", {3, 2, 9, 8},
       {3, 2, 3, 2}, {2, 1, 2, 1, 2, 2, 1}, centred, false, false, true, config(nearest, max)},
      {"conv 3x3 stride 2 padding 1 on an odd map (ResNet's downsampling: the input gradient in four phases, Note "
       "[the strided input gradient in phases])",
       {2, 16, 9, 8}, {7, 16, 3, 3}, {2, 2, 1, 1, 1, 1, 1}, u8, true, true, true,
       config(stochastic, direction_sensitive)},
      {"conv 2x2 stride 3 without padding (input rows no tap reaches: their gradient 0)", {2, 16, 8, 7},
       {4, 16, 2, 2}, {3, 3, 0, 0, 1, 1, 1}, u8, true, false, true, config(stochastic, direction_sensitive)},
      {"conv 3x3 stride 2 dilation 2 padding 2 (one phase holds every tap, the other none)", {2, 16, 9, 9},
       {4, 16, 3, 3}, {2, 2, 2, 2, 2, 2, 1}, centred, false, true, true, config(nearest, max)},
      {"conv without padding on a fractional zero point (LSQ+), 4-bit gradients", {2, 4, 5, 5}, {6, 4, 2, 2},
       Conv2dParams{}, frac, true, true, true, config(stochastic, direction_sensitive, 4)},
      {"conv 1x1, 64 outputs (its rows the planes transposed, kept for the packed weight gradient)", {2, 8, 5, 5},
       {64, 8, 1, 1}, Conv2dParams{}, u8, true, true, true, config(stochastic, direction_sensitive)},
      {"linear, 70 outputs (two GEMM tiles), 100 inputs", {5, 100}, {70, 100}, Conv2dParams{}, u8, true, true, true,
       config(stochastic, direction_sensitive)},
      {"linear, one sample, per-tensor weight", {1, 33}, {3, 33}, Conv2dParams{}, centred, false, true, true,
       config(nearest, direction_sensitive)},
      {"conv over 4096 elements (several per reduction slot), max clipping, an all-zero gradient on step 1",
       {2, 4, 31, 29}, {8, 4, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, u8, true, true, true, config(stochastic, max), true, 1},
      {"conv over 4418 output positions: the packed weight gradient in two blocks of M, the second ending mid-quad "
       "(Note [the weight gradient in blocks of M])",
       {2, 3, 47, 47}, {16, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, u8, true, true, true,
       config(stochastic, direction_sensitive)},
      // Inputs on {0, 1}: every (G + 128)(u - 128) term near -128^2, so dW's sums pass -2^31.
      {"conv over 153600 output positions on a two-level grid: the blocks' sums past int32 (Note [the weight "
       "gradient in blocks of M])",
       {2, 1, 256, 300}, {16, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, ActGrid{0.05f, 0.0, 2}, true, true, false,
       config(stochastic, direction_sensitive)},
      // Note [the weight gradient's rows packed in the forward] (AVX-512 VNNI CPUs):
      {"conv over 5 images of 32x32: rows packed by the forward, blocks of 4 images (the second of 1)",
       {5, 16, 32, 32}, {16, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, u8, true, true, true,
       config(stochastic, direction_sensitive)},
      {"conv over 2 images of 64x128: rows packed by the forward, 4096-row blocks, two an image", {2, 3, 64, 128},
       {16, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, u8, true, true, false, config(stochastic, direction_sensitive)},
      {"conv over 3 images of 48x48: rows packed by the forward, a block an image", {3, 8, 48, 48}, {32, 8, 3, 3},
       {1, 1, 1, 1, 1, 1, 1}, centred, false, false, true, config(nearest, max)},
      {"conv over 4 images of 8x8: rows packed by the forward, one block", {4, 16, 8, 8}, {16, 16, 3, 3},
       {1, 1, 1, 1, 1, 1, 1}, u8, true, true, true, config(stochastic, direction_sensitive)},
      {"linear whose weight takes no gradient (the input's only), an all-zero gradient on step 0", {4, 50}, {9, 50},
       Conv2dParams{}, u8, true, false, true, config(stochastic, direction_sensitive), false, 0},
      {"depthwise 3x3, stride 2, padding 1, per-channel weights, bias (Note [INT8 training of depthwise layers])",
       {2, 6, 9, 8}, {6, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 6}, u8, true, true, true, config(stochastic, direction_sensitive)},
      {"depthwise 3x3, dilation 2, padding 2, per-tensor weight, nearest rounding, max clipping", {3, 4, 7, 7},
       {4, 1, 3, 3}, {1, 1, 2, 2, 2, 2, 4}, centred, false, false, true, config(nearest, max)},
      {"depthwise 5x5, stride 1x2, padding 2x1 (two column phases of the CPU's planes), bias", {2, 5, 11, 10},
       {5, 1, 5, 5}, {1, 2, 2, 1, 1, 1, 5}, u8, true, true, true, config(stochastic, direction_sensitive)},
      // The CPU's forward sums in float where the zero point is an integer
      // (Note [exact float depthwise sums]); this one takes its int32 planes.
      {"depthwise 2x2 without padding on a fractional zero point (LSQ+)", {2, 4, 6, 5}, {4, 1, 2, 2},
       {1, 1, 0, 0, 1, 1, 4}, frac, true, true, true, config(stochastic, direction_sensitive)},
  };
}

}  // namespace

TEST_CASE("INT8 training's device twin, emulated on the host, equals the CPU op bit for bit over three steps",
          "[quant][int8train][math]") {
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const auto want = three_steps(c, Device::cpu, [&](auto&&... a) { return cpu_op(c, a...); });
      const auto got = three_steps(c, Device::cpu, [&](auto&&... a) { return emulated_op(c, a...); });
      REQUIRE(!(c.weight_grad ? want.back().G : want.back().Gx).empty());  // the quantizers ran
      require_same_steps(got, want);
    }
  }
}

namespace {
// The message of what `f` throws ("" when nothing).
template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("INT8 training's device twin reports a non-finite gradient as the CPU op does", "[quant][int8train][math]") {
  // dW's tracking and every refresh (step 0's): a NaN anywhere wins; dX's
  // tracking (the weight needing no gradient): the first non-finite value, an
  // inf or a NaN (nan_first: which of the two comes first in index order).
  // Output planes of 7x6 and 12x10: dX's scan runs image by image below 64
  // positions a plane, plane by plane from there.
  const Case base = cases()[0];
  for (int variant = 0; variant < 16; ++variant) {  // every combination of the four choices
    const bool weight_grad = (variant & 1) == 0, nan_first = (variant & 4) != 0, long_planes = (variant & 8) != 0;
    const int bad_step = (variant >> 1) & 1;
    Case c = base;
    c.weight_grad = weight_grad;
    if (long_planes) c.x = {2, 3, 12, 10};
    CAPTURE(weight_grad, bad_step, nan_first, long_planes);
    auto run = [&](auto op) {
      Generator g(5);
      const Tensor s = Tensor::full({c.w[0]}, 0.01f);
      const Tensor x0 = on_grid(c.x, c.grid, g), w0 = int8_weight(c.w, s, g);
      auto st = std::make_shared<Int8GradState>(c.cfg, 7, "features.3");
      return message_of([&] {
        for (int step = 0; step <= bad_step; ++step) {
          Tensor x = x0.clone().set_requires_grad(true), w = w0.clone().set_requires_grad(weight_grad);
          Tensor y = op(c, x, w, s, Tensor(), st);
          Tensor gy = Tensor::randn(y.sizes(), g);
          if (step == bad_step) {
            gy.data<float>()[nan_first ? 300 : 40] = std::numeric_limits<float>::infinity();
            gy.data<float>()[nan_first ? 40 : 300] = std::numeric_limits<float>::quiet_NaN();
          }
          sum(mul(y, gy)).backward();
        }
      });
    };
    const std::string want = run(cpu_op), got = run(emulated_op);
    const bool nan_reported = weight_grad || bad_step == 0 || nan_first;  // (step 0 refreshes the clip)
    CHECK_THAT(want, Contains(std::string("layer features.3: the output gradient holds ") +
                              (nan_reported ? "nan" : "inf")));
    CHECK(got == want);
  }
}

TEST_CASE("INT8 training's device twin names the layer and the value off the grid", "[quant][int8train][math]") {
  const Case c = cases()[0];
  Generator g(3);
  const Tensor s = Tensor::full({c.w[0]}, 0.01f);
  Tensor x = on_grid(c.x, c.grid, g), w = int8_weight(c.w, s, g);
  auto st = std::make_shared<Int8GradState>(c.cfg, 7, "features.0");
  x.data<float>()[17] += 0.01f;  // a fifth of a step off
  REQUIRE_THROWS_WITH(emulated_op(c, x, w, s, Tensor(), st),
                      Contains("layer features.0: input value") && Contains("at index 17") &&
                          Contains("not on its quantizer's grid"));
  // Over 4096 elements: the first of several off the grid, in other slots.
  Case big = c;
  big.x = {2, 3, 40, 40};
  Tensor xb = on_grid(big.x, big.grid, g);
  for (const int64_t i : {9001, 5000, 7000}) xb.data<float>()[i] += 0.01f;
  const std::string want = message_of([&] { cpu_op(big, xb, w, s, Tensor(), st); });
  CHECK_THAT(want, Contains("at index 5000"));
  CHECK(message_of([&] { emulated_op(big, xb, w, s, Tensor(), st); }) == want);
  x = on_grid(c.x, c.grid, g);
  w.data<float>()[2 * 27 + 5] *= 1.5f;  // row 2
  REQUIRE_THROWS_WITH(emulated_op(c, x, w, s, Tensor(), st),
                      Contains("layer features.0: weight") && Contains("(row 2) is not on its int8 grid"));
  // Both wrong: the weight is named first, by both.
  x.data<float>()[3] += 0.01f;
  const std::string both = message_of([&] { cpu_op(c, x, w, s, Tensor(), st); });
  CHECK_THAT(both, Contains("(row 2)"));
  CHECK(message_of([&] { emulated_op(c, x, w, s, Tensor(), st); }) == both);
}

TEST_CASE("INT8 training on the GPU equals the CPU op bit for bit over three steps", "[quant][int8train][cuda]") {
  if (!testing::cuda_device_or_skip()) {
    const Case c = cases()[0];
    Generator g(3);
    const Tensor s = Tensor::full({c.w[0]}, 0.01f);
    const Tensor x = on_grid(c.x, c.grid, g), w = int8_weight(c.w, s, g);
    auto st = std::make_shared<Int8GradState>(c.cfg, 7, "conv1");
    testing::CudaOrLabelled xd(x);
    REQUIRE_THROWS_WITH(int8_conv2d(xd.t, c.grid, w, s, Tensor(), c.p, st),
                        Contains("int8 training: layer conv1: the input is on cuda, the weight on cpu"));
    return;
  }
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const auto want = three_steps(c, Device::cpu, [&](auto&&... a) { return cpu_op(c, a...); });
      const auto got = three_steps(c, Device::cuda, [&](auto&&... a) { return cpu_op(c, a...); });
      require_same_steps(got, want);
    }
  }
}

namespace {
// An output stage that keeps the int64 sums.
struct Record64 {
  using Acc = int64_t;
  int64_t* out;
  int64_t n;
  void operator()(int64_t r, int64_t c, int64_t v) const { out[r * n + c] = v; }
};
}  // namespace

TEST_CASE("the device GEMM's INT8-training operands equal plain sums, int64 past int32's range",
          "[quant][int8train][math]") {
  std::mt19937 rng(8);
  // Gx (m x o) . W^T read by columns (the input gradient), odd sizes
  {
    const int64_t m = 67, o = 35, k = 70;
    std::vector<int8_t> gx(static_cast<size_t>(m * o)), w(static_cast<size_t>(o * k));
    for (auto& v : gx) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    for (auto& v : w) v = static_cast<int8_t>(rng() % 256);
    std::vector<int64_t> out(static_cast<size_t>(m * k), -1);
    testing::HostExec ex;
    ex.gemm(int_math::S8Rows{gx.data(), o}, int_math::S8Columns{w.data(), k}, m, k, o, Record64{out.data(), k});
    bool equal = true;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k; ++c) {
        int64_t ref = 0;
        for (int64_t j = 0; j < o; ++j) ref += gx[r * o + j] * w[j * k + c];
        equal = equal && out[r * k + c] == ref;
      }
    REQUIRE(equal);
  }
  // G (o x M) . patch columns (u - 128) over M = 140000 rows of extreme
  // values: |sum| ~ 2.3e9, beyond int32, exact in the int64 accumulator.
  {
    const int64_t o = 2, M = 140000;
    const int8_math::Geometry geo{M, 3, 1, 1, o, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};  // a linear layer, K = 3
    const int64_t K = geo.K();
    std::vector<uint8_t> u(static_cast<size_t>(M * K), 0);  // u - 128 = -128
    std::vector<int8_t> G(static_cast<size_t>(o * M), -127);
    for (int64_t i = 0; i < M; i += 7) u[i * K + 1] = 255, G[i] = 127;  // some other extremes
    std::vector<int64_t> out(static_cast<size_t>(o * K), -1);
    testing::HostExec ex;
    ex.gemm(int_math::S8Rows{G.data(), M}, int8_math::PatchColumns{{u.data(), geo, 0}}, o, K, M, Record64{out.data(), K});
    bool equal = true, beyond = false;
    for (int64_t r = 0; r < o; ++r)
      for (int64_t c = 0; c < K; ++c) {
        int64_t ref = 0;
        for (int64_t i = 0; i < M; ++i) ref += int64_t{G[r * M + i]} * (int64_t{u[i * K + c]} - 128);
        equal = equal && out[r * K + c] == ref;
        beyond = beyond || ref > INT32_MAX || ref < INT32_MIN;
      }
    REQUIRE(beyond);
    REQUIRE(equal);
  }
}
