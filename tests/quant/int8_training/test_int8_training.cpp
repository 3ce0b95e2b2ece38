// INT8 training ops (quant/int8_training/int8_ops.h): the forward equals the float
// convolution of the fake-quantized values up to summation order, and the
// input and weight gradients equal, bit for bit, the backward computed in
// double from the very integers the op quantized.
#include <algorithm>
#include <cmath>

#include "tests/test_util.h"

#include "core/collective.h"
#include "core/ops.h"
#include "layers/layers.h"
#include "models/models.h"
#include "quant/int8_training/grad_quant.h"
#include "quant/int8_training/int8_math.h"
#include "quant/int8_training/int8_ops.h"
#include "quant/sim/int8_training.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

// A tensor on the grid x = s (u - zero), u in [0, 256), and its integers.
struct OnGrid {
  Tensor x;
  std::vector<int64_t> u;
};
OnGrid on_grid(const Shape& shape, const ActGrid& grid, Generator& g) {
  OnGrid r{Tensor::empty(shape), {}};
  for (int64_t i = 0; i < r.x.numel(); ++i) {
    const int64_t u = static_cast<int64_t>(g.below(256));
    r.u.push_back(u);
    r.x.data<float>()[i] = static_cast<float>(grid.scale * (static_cast<double>(u) - grid.zero));
  }
  return r;
}

// Symmetric per-channel int8 weights: wq = s_w[o] W.
struct Weights {
  Tensor wq, scale;
  std::vector<int64_t> w;
};
Weights int8_weights(const Shape& shape, Generator& g) {
  Weights r{Tensor::empty(shape), Tensor::empty({shape[0]}), {}};
  const int64_t O = shape[0], K = r.wq.numel() / O;
  for (int64_t o = 0; o < O; ++o) {
    r.scale.data<float>()[o] = 0.01f * static_cast<float>(o + 1);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t w = static_cast<int64_t>(g.below(256)) - 128;
      r.w.push_back(w);
      r.wq.data<float>()[o * K + k] = r.scale.data<float>()[o] * static_cast<float>(w);
    }
  }
  return r;
}

// A GEMM kernel (testing::gemm_kernels_here(): the packed input gradient on
// VNNI, the transposed-weight path on the others), set for the INT8 ops while alive.
struct KernelGuard {
  explicit KernelGuard(GemmKernel k) { set_int8_training_kernel(k); }
  ~KernelGuard() { set_int8_training_kernel(std::nullopt); }
};

std::shared_ptr<Int8GradState> state_keeping_integers(GradRounding rounding = GradRounding::stochastic) {
  Int8GradConfig cfg;
  cfg.rounding = rounding;
  auto st = std::make_shared<Int8GradState>(cfg, 7, "test_layer");
  st->keep_last = true;
  return st;
}

}  // namespace

TEST_CASE("INT8 conv forward equals the float conv of the fake-quantized values", "[quant][int8train]") {
  Generator g(1);
  const ActGrid grid{0.05f, 3.0, 256};
  const OnGrid in = on_grid({2, 3, 9, 8}, grid, g);
  const Weights w = int8_weights({4, 3, 3, 3}, g);
  Tensor bias = Tensor::randn({4}, g);
  for (const Conv2dParams& p : {Conv2dParams{}, Conv2dParams{2, 2, 1, 1, 1, 1, 1}, Conv2dParams{1, 2, 2, 0, 1, 1, 1}}) {
    INFO("stride " << p.stride_h << "," << p.stride_w << " pad " << p.pad_h << "," << p.pad_w);
    Tensor want = conv2d(in.x, w.wq, bias, p);
    Tensor got = int8_conv2d(in.x, grid, w.wq, w.scale, bias, p, state_keeping_integers());
    // One rounding of the exact integer sum against float32 sums of products.
    testing::require_close(got, want, 1e-5, 1e-5, "int8 conv forward");
  }
}

// Output channels a multiple of the packed kernels' column blocks (16 for
// AMX, 64 for VNNI): the forward runs on the packed weight there, and must
// give the reference kernel's output bit for bit (the same integer sums).
TEST_CASE("INT8 conv forward on the packed weight equals the reference kernel bit for bit", "[quant][int8train]") {
  Generator g(15);
  const ActGrid grid{0.05f, 3.0, 256};
  const OnGrid in = on_grid({2, 5, 9, 8}, grid, g);
  for (const int64_t O : {16, 64, 128}) {
    const Weights w = int8_weights({O, 5, 3, 3}, g);
    Tensor bias = Tensor::randn({O}, g);
    const Conv2dParams p{1, 2, 1, 0, 1, 1, 1};
    Tensor want;
    {
      KernelGuard kg(GemmKernel::reference);
      want = int8_conv2d(in.x, grid, w.wq, w.scale, bias, p, state_keeping_integers());
    }
    for (const GemmKernel kernel : testing::gemm_kernels_here()) {
      INFO("O " << O << " " << enum_name(kernel));
      KernelGuard kg(kernel);
      testing::require_close(int8_conv2d(in.x, grid, w.wq, w.scale, bias, p, state_keeping_integers()), want, 0.0,
                             0.0, "packed int8 conv forward");
    }
  }
}

// A 1x1 input whose only tap of a padded 1x1 kernel is the padding: the op
// must not read the input as its im2row rows (a linear layer's shortcut).
TEST_CASE("INT8 conv of a padded 1x1 input sees only the padding on every kernel", "[quant][int8train]") {
  Generator g(14);
  const ActGrid grid{0.05f, 3.0, 256};
  const OnGrid in = on_grid({2, 2, 1, 1}, grid, g);
  const Weights w = int8_weights({3, 2, 1, 1}, g);
  Tensor bias = Tensor::randn({3}, g);
  const Conv2dParams p{3, 3, 1, 1, 1, 1, 1};  // stride 3, padding 1: output 1x1 at the padding
  for (const GemmKernel kernel : testing::gemm_kernels_here()) {
    INFO(enum_name(kernel));
    KernelGuard kg(kernel);
    Tensor x = in.x.clone().set_requires_grad(true), wq = w.wq.clone().set_requires_grad(true);
    Tensor y = int8_conv2d(x, grid, wq, w.scale, bias, p, state_keeping_integers());
    REQUIRE(y.sizes() == Shape{2, 3, 1, 1});
    testing::require_close(y, conv2d(in.x, w.wq, bias, p), 0.0, 0.0, "padded 1x1 conv forward");
    sum(mul(y, Tensor::randn(y.sizes(), g))).backward();
    for (const float v : wq.grad().to_vector()) REQUIRE(v == 0.f);  // u - zx = 0 at the padding
    for (const float v : x.grad().to_vector()) REQUIRE(v == 0.f);   // no pixel is tapped
  }
}

TEST_CASE("INT8 linear forward equals the float linear of the fake-quantized values", "[quant][int8train]") {
  Generator g(2);
  const ActGrid grid{0.02f, 0.0, 256};
  const OnGrid in = on_grid({5, 37}, grid, g);
  const Weights w = int8_weights({6, 37}, g);
  Tensor bias = Tensor::randn({6}, g);
  testing::require_close(int8_linear(in.x, grid, w.wq, w.scale, bias, state_keeping_integers()),
                         linear(in.x, w.wq, bias), 1e-5, 1e-5, "int8 linear forward");
}

// dWq[o][k] = (s_G s_x) (sum_m G[o][m] u[m][k] - zx sum_m G[o][m]) and
// dXq[n][c][y][x] = s_Gx sum over the windows covering the pixel of Gx W,
// computed here in int64 / double from the op's own integers.
// Stride (2, 1) and 3 channels: the col2im form of the input gradient; with
// channels a multiple of 16: its convolution form (Note [the input gradient
// as a convolution]) where the packed kernels run, with padding below the
// kernel's reach and dilation, and at strides 2 and 3 in phases (Note [the
// strided input gradient in phases]): ResNet's downsampling 3x3 on an odd
// map, unequal strides, a 2x2 kernel at stride 3 (rows no tap reaches),
// stride 2 with dilation 2 (one phase takes every tap, the other none).
TEST_CASE("INT8 conv gradients equal the double backward of the quantized integers exactly", "[quant][int8train]") {
  Generator g(3);
  const ActGrid grid{0.03f, 17.0, 256};
  struct Shape {
    int64_t C, H, W, O, KH, KW;
    Conv2dParams p;
  };
  const Shape shapes[] = {{3, 7, 6, 5, 3, 2, {2, 1, 1, 1, 1, 1, 1}},
                          {16, 6, 5, 7, 3, 3, {1, 1, 1, 1, 1, 1, 1}},
                          {32, 7, 7, 5, 3, 2, {1, 1, 2, 0, 2, 1, 1}},
                          {16, 9, 8, 7, 3, 3, {2, 2, 1, 1, 1, 1, 1}},
                          {16, 10, 9, 6, 3, 2, {2, 3, 1, 0, 1, 1, 1}},
                          {16, 8, 7, 5, 2, 2, {3, 3, 0, 0, 1, 1, 1}},
                          {32, 9, 9, 4, 3, 3, {2, 2, 2, 2, 2, 2, 1}}};
  for (const Shape& sh : shapes)
  for (const GemmKernel kernel : testing::gemm_kernels_here()) {
    for (const GradRounding rounding : {GradRounding::stochastic, GradRounding::nearest}) {
      const int64_t N = 2, C = sh.C, H = sh.H, W = sh.W, O = sh.O, KH = sh.KH, KW = sh.KW;
      const Conv2dParams& p = sh.p;
      INFO(enum_name(rounding) << " " << enum_name(kernel) << " C " << C << " stride " << p.stride_h);
      KernelGuard kg(kernel);
      OnGrid in = on_grid({N, C, H, W}, grid, g);
      Weights w = int8_weights({O, C, KH, KW}, g);
      Tensor x = in.x.clone().set_requires_grad(true);
      Tensor wq = w.wq.clone().set_requires_grad(true);
      auto st = state_keeping_integers(rounding);
      Tensor y = int8_conv2d(x, grid, wq, w.scale, Tensor(), p, st);
      const int64_t OH = y.size(2), OW = y.size(3), P = OH * OW, M = N * P, K = C * KH * KW;
      // A long-tailed upstream gradient, as real ones are.
      Tensor gy = Tensor::randn(y.sizes(), g);
      for (int64_t i = 0; i < gy.numel(); i += 7) gy.data<float>()[i] *= 30.f;
      sum(mul(y, gy)).backward();
      REQUIRE(st->last_g.size() == static_cast<size_t>(O * M));
      REQUIRE(st->last_gx.size() == static_cast<size_t>(M * O));
      auto u_at = [&](int64_t n, int64_t c, int64_t iy, int64_t ix) -> double {
        if (iy < 0 || iy >= H || ix < 0 || ix >= W) return grid.zero;  // padding: real 0
        return static_cast<double>(in.u[((n * C + c) * H + iy) * W + ix]);
      };
      std::vector<float> dw_want(static_cast<size_t>(O * K)), dx_want(static_cast<size_t>(N * C * H * W));
      std::vector<int64_t> dx_sum(dx_want.size(), 0);
      for (int64_t o = 0; o < O; ++o)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ki = 0; ki < KH; ++ki)
            for (int64_t kj = 0; kj < KW; ++kj) {
              double acc = 0;  // integers (and integer zx): exact in double
              for (int64_t n = 0; n < N; ++n)
                for (int64_t oy = 0; oy < OH; ++oy)
                  for (int64_t ox = 0; ox < OW; ++ox) {
                    const int64_t m = (n * OH + oy) * OW + ox;
                    const int64_t iy = oy * p.stride_h - p.pad_h + ki * p.dil_h;
                    const int64_t ix = ox * p.stride_w - p.pad_w + kj * p.dil_w;
                    acc += st->last_g[o * M + m] * (u_at(n, c, iy, ix) - grid.zero);
                    if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                      dx_sum[((n * C + c) * H + iy) * W + ix] +=
                          int64_t{st->last_gx[m * O + o]} * w.w[o * K + (c * KH + ki) * KW + kj];
                  }
              const double s = static_cast<double>(st->last_scale_g) * static_cast<double>(grid.scale);
              dw_want[o * K + (c * KH + ki) * KW + kj] = static_cast<float>(s * acc);
            }
      for (size_t i = 0; i < dx_sum.size(); ++i)
        dx_want[i] = static_cast<float>(static_cast<double>(st->last_scale_gx) * static_cast<double>(dx_sum[i]));
      REQUIRE(wq.grad().to_vector() == dw_want);
      REQUIRE(x.grad().to_vector() == dx_want);
      // And the integers are dY (and dY * s_w) quantized with the recorded scales.
      const int qmax = grad_qmax(8);
      bool g_ok = true, gx_ok = true;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o)
          for (int64_t q = 0; q < P; ++q) {
            const float v = gy.data<float>()[(n * O + o) * P + q];
            const int64_t m = n * P + q;
            const float t = v / st->last_scale_g;
            const int8_t G = st->last_g[o * M + m];
            g_ok = g_ok && (G == qmax || G == -qmax || std::abs(t - G) < 1.0001f);
            const float tx = v * w.scale.data<float>()[o] / st->last_scale_gx;
            const int8_t Gx = st->last_gx[m * O + o];
            gx_ok = gx_ok && (Gx == qmax || Gx == -qmax || std::abs(tx - Gx) < 1.0001f);
          }
      REQUIRE(g_ok);
      REQUIRE(gx_ok);
    }
  }
}

// Note [INT8 training of depthwise layers]: the forward against the float
// depthwise conv of the fake-quantized values; both gradients against the
// double backward of the integers the layer quantized, bit for bit (stride,
// padding, dilation; zx an integer, so every double sum is exact).
TEST_CASE("INT8 depthwise conv: forward as the float conv, gradients equal the double backward exactly",
          "[quant][int8train]") {
  Generator g(23);
  const ActGrid grid{0.04f, 9.0, 256};
  const int64_t N = 2, C = 6, H = 9, W = 7, KH = 3, KW = 3;
  for (const Conv2dParams& p : {Conv2dParams{1, 1, 1, 1, 1, 1, C}, Conv2dParams{2, 2, 1, 1, 1, 1, C},
                                Conv2dParams{1, 2, 2, 1, 2, 2, C}}) {
    INFO("stride " << p.stride_h << "," << p.stride_w << " pad " << p.pad_h << "," << p.pad_w << " dilation "
                   << p.dil_h << "," << p.dil_w);
    OnGrid in = on_grid({N, C, H, W}, grid, g);
    Weights w = int8_weights({C, 1, KH, KW}, g);
    Tensor bias = Tensor::randn({C}, g);
    testing::require_close(int8_conv2d(in.x, grid, w.wq, w.scale, bias, p, state_keeping_integers()),
                           conv2d(in.x, w.wq, bias, p), 1e-5, 1e-5, "int8 depthwise forward");
    Tensor x = in.x.clone().set_requires_grad(true);
    Tensor wq = w.wq.clone().set_requires_grad(true);
    auto st = state_keeping_integers();
    Tensor y = int8_conv2d(x, grid, wq, w.scale, Tensor(), p, st);
    const int64_t OH = y.size(2), OW = y.size(3), P = OH * OW, M = N * P, K = KH * KW;
    Tensor gy = Tensor::randn(y.sizes(), g);
    for (int64_t i = 0; i < gy.numel(); i += 5) gy.data<float>()[i] *= 20.f;
    sum(mul(y, gy)).backward();
    REQUIRE(st->last_g.size() == static_cast<size_t>(C * M));
    REQUIRE(st->last_gx.size() == static_cast<size_t>(M * C));
    std::vector<float> dw_want(static_cast<size_t>(C * K)), dx_want(static_cast<size_t>(N * C * H * W));
    std::vector<int64_t> dx_sum(dx_want.size(), 0);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ki = 0; ki < KH; ++ki)
        for (int64_t kj = 0; kj < KW; ++kj) {
          double acc = 0;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t oy = 0; oy < OH; ++oy)
              for (int64_t ox = 0; ox < OW; ++ox) {
                const int64_t m = (n * OH + oy) * OW + ox;
                const int64_t iy = oy * p.stride_h - p.pad_h + ki * p.dil_h, ix = ox * p.stride_w - p.pad_w + kj * p.dil_w;
                const bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
                const double u = inside ? static_cast<double>(in.u[((n * C + c) * H + iy) * W + ix]) : grid.zero;
                acc += st->last_g[c * M + m] * (u - grid.zero);
                if (inside)
                  dx_sum[((n * C + c) * H + iy) * W + ix] += int64_t{st->last_gx[m * C + c]} * w.w[c * K + ki * KW + kj];
              }
          const double s = static_cast<double>(st->last_scale_g) * static_cast<double>(grid.scale);
          dw_want[c * K + ki * KW + kj] = static_cast<float>(s * acc);
        }
    for (size_t i = 0; i < dx_sum.size(); ++i)
      dx_want[i] = static_cast<float>(static_cast<double>(st->last_scale_gx) * static_cast<double>(dx_sum[i]));
    REQUIRE(wq.grad().to_vector() == dw_want);
    REQUIRE(x.grad().to_vector() == dx_want);
  }
}

// The forward's im2row copies each kernel row as an 8- or 16-byte word whose
// bytes past the row the next row's copy overwrites; rows of other threads
// must never be reached. The layer on two threads equals it on one, bit for
// bit, for each copy (words of 8 and 16, the exact strided copy under width
// dilation, kernel rows longer than 16).
TEST_CASE("an INT8 conv on two threads equals it on one bit for bit", "[quant][int8train]") {
  struct Case {
    Shape x, w;
    Conv2dParams p;
  };
  const std::vector<Case> cases = {
      {{3, 4, 9, 9}, {5, 4, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},     // rows of 3: 8-byte words
      {{2, 3, 35, 35}, {4, 3, 11, 11}, {4, 4, 2, 2, 1, 1, 1}},  // conv1-like: 16-byte words
      {{2, 2, 9, 9}, {3, 2, 2, 3}, {1, 1, 1, 1, 2, 2, 1}},      // width dilation: strided copies
      {{2, 2, 5, 21}, {3, 2, 2, 17}, {1, 1, 0, 1, 1, 1, 1}},    // rows of 17 bytes
      // 16 outputs: the forward in chunks, and on AVX-512 VNNI its rows packed by
      // the chunks of both threads into two blocks (Note [the weight gradient's
      // rows packed in the forward])
      {{6, 8, 32, 32}, {16, 8, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
  };
  Generator g(21);
  const ActGrid grid{0.05f, 9.0, 256};
  for (const Case& c : cases) {
    INFO("input " << c.x[2] << "x" << c.x[3] << " kernel " << c.w[2] << "x" << c.w[3]);
    const OnGrid in = on_grid(c.x, grid, g);
    const Weights w = int8_weights(c.w, g);
    Tensor bias = Tensor::randn({c.w[0]}, g);
    auto run = [&](int threads) {
      testing::ThreadsGuard guard(threads);
      Tensor x = in.x.clone().set_requires_grad(true), wq = w.wq.clone().set_requires_grad(true);
      Tensor y = int8_conv2d(x, grid, wq, w.scale, bias, c.p, state_keeping_integers());
      Generator gg(5);
      sum(mul(y, Tensor::randn(y.sizes(), gg))).backward();
      return TensorList{y, x.grad(), wq.grad()};
    };
    const TensorList one = run(1), two = run(2);
    // The forward from the integers: s_x s_w[o] (sum u w - zx sum w) rounded
    // once to float, plus the bias (the op's output stage), padding u = zx.
    const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], O = c.w[0], KH = c.w[2], KW = c.w[3];
    const int64_t OH = one[0].size(2), OW = one[0].size(3);
    Tensor want = Tensor::empty(one[0].sizes());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t oy = 0; oy < OH; ++oy)
          for (int64_t ox = 0; ox < OW; ++ox) {
            int64_t acc = 0, wsum = 0;
            for (int64_t ch = 0; ch < C; ++ch)
              for (int64_t ki = 0; ki < KH; ++ki)
                for (int64_t kj = 0; kj < KW; ++kj) {
                  const int64_t iy = oy * c.p.stride_h - c.p.pad_h + ki * c.p.dil_h;
                  const int64_t ix = ox * c.p.stride_w - c.p.pad_w + kj * c.p.dil_w;
                  const int64_t u = iy < 0 || iy >= H || ix < 0 || ix >= W
                                        ? static_cast<int64_t>(grid.zero)
                                        : in.u[((n * C + ch) * H + iy) * W + ix];
                  const int64_t wk = w.w[((o * C + ch) * KH + ki) * KW + kj];
                  acc += u * wk, wsum += wk;
                }
            const double sc = static_cast<double>(grid.scale) * static_cast<double>(w.scale.data<float>()[o]);
            want.data<float>()[((n * O + o) * OH + oy) * OW + ox] =
                static_cast<float>(sc * (static_cast<double>(acc) - grid.zero * static_cast<double>(wsum))) +
                bias.data<float>()[o];
          }
    testing::check_same_bits(one[0], want, "forward on one thread");
    testing::check_same_bits(two[0], one[0], "y");
    testing::check_same_bits(two[1], one[1], "dx");
    testing::check_same_bits(two[2], one[2], "dw");
  }
}

TEST_CASE("INT8 linear gradients equal the double backward of the quantized integers exactly", "[quant][int8train]") {
  Generator g(4);
  const ActGrid grid{0.04f, 0.0, 256};
  const int64_t N = 6, K = 33, O = 7;
  for (const GemmKernel kernel : testing::gemm_kernels_here()) {
    INFO(enum_name(kernel));
    KernelGuard kg(kernel);
    OnGrid in = on_grid({N, K}, grid, g);
    Weights w = int8_weights({O, K}, g);
    Tensor x = in.x.clone().set_requires_grad(true);
    Tensor wq = w.wq.clone().set_requires_grad(true);
    Tensor b = Tensor::randn({O}, g).set_requires_grad(true);
    auto st = state_keeping_integers();
    Tensor gy = Tensor::randn({N, O}, g);
    sum(mul(int8_linear(x, grid, wq, w.scale, b, st), gy)).backward();
    std::vector<float> dw(static_cast<size_t>(O * K)), dx(static_cast<size_t>(N * K)), db(static_cast<size_t>(O));
    for (int64_t o = 0; o < O; ++o) {
      double bsum = 0;
      for (int64_t n = 0; n < N; ++n) bsum += gy.data<float>()[n * O + o];
      db[o] = static_cast<float>(bsum);
      for (int64_t k = 0; k < K; ++k) {
        int64_t acc = 0;
        for (int64_t n = 0; n < N; ++n) acc += int64_t{st->last_g[o * N + n]} * in.u[n * K + k];
        dw[o * K + k] = static_cast<float>(static_cast<double>(st->last_scale_g) * static_cast<double>(grid.scale) *
                                           static_cast<double>(acc));
      }
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        int64_t acc = 0;
        for (int64_t o = 0; o < O; ++o) acc += int64_t{st->last_gx[n * O + o]} * w.w[o * K + k];
        dx[n * K + k] = static_cast<float>(static_cast<double>(st->last_scale_gx) * static_cast<double>(acc));
      }
    REQUIRE(wq.grad().to_vector() == dw);
    REQUIRE(x.grad().to_vector() == dx);
    REQUIRE(b.grad().to_vector() == db);
    REQUIRE(st->steps() == 1);
    REQUIRE(st->distance(0) > 0.f);
    REQUIRE(st->distance(0) < 0.01f);  // 8-bit gradients keep the direction
  }
}

// M = 70,000 output positions: the weight gradient sums two chunks of 2^16
// rows (int32 each, int64 across), on any thread count the same.
// (On the packed kernels, in blocks of M: Note [the weight gradient in blocks of M].)
TEST_CASE("the INT8 weight gradient sums more than 2^16 rows exactly on any thread count and kernel",
          "[quant][int8train]") {
  Generator g(8);
  const ActGrid grid{0.01f, 5.0, 256};
  const int64_t N = 7, C = 2, H = 100, W = 100, O = 3;
  OnGrid in = on_grid({N, C, H, W}, grid, g);
  Weights w = int8_weights({O, C, 1, 1}, g);
  Tensor gy = Tensor::randn({N, O, H, W}, g);
  std::vector<std::vector<float>> dws;
  for (const GemmKernel kernel : testing::gemm_kernels_here())
  for (const int threads : {1, 2}) {
    INFO(enum_name(kernel) << ", " << threads << " threads");
    KernelGuard kg(kernel);
    testing::ThreadsGuard tg(threads);
    Tensor wq = w.wq.clone().set_requires_grad(true);
    auto st = state_keeping_integers();
    sum(mul(int8_conv2d(in.x, grid, wq, w.scale, Tensor(), Conv2dParams{}, st), gy)).backward();
    const int64_t M = N * H * W;
    std::vector<float> want(static_cast<size_t>(O * C));
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c) {
        int64_t acc = 0, gsum = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t p = 0; p < H * W; ++p) {
            const int64_t G = st->last_g[o * M + n * H * W + p];
            acc += G * in.u[(n * C + c) * H * W + p];
            gsum += G;
          }
        const double s = static_cast<double>(st->last_scale_g) * static_cast<double>(grid.scale);
        want[o * C + c] = static_cast<float>(s * (static_cast<double>(acc) - grid.zero * static_cast<double>(gsum)));
      }
    REQUIRE(wq.grad().to_vector() == want);
    dws.push_back(wq.grad().to_vector());
  }
  for (const std::vector<float>& dw : dws) REQUIRE(dw == dws[0]);
}

TEST_CASE("an INT8 layer refuses inputs that are not on its grid", "[quant][int8train]") {
  Generator g(5);
  const ActGrid grid{0.05f, 0.0, 256};
  OnGrid in = on_grid({2, 4}, grid, g);
  in.x.data<float>()[3] += 0.4f * grid.scale;  // off the grid
  const Weights w = int8_weights({3, 4}, g);
  REQUIRE_THROWS_WITH(int8_linear(in.x, grid, w.wq, w.scale, Tensor(), state_keeping_integers()),
                      Contains("test_layer") && Contains("not on its quantizer's grid") && Contains("index 3"));
  Weights off = int8_weights({3, 4}, g);
  off.wq.data<float>()[5] *= 1.3f;
  OnGrid ok = on_grid({2, 4}, grid, g);
  REQUIRE_THROWS_WITH(int8_linear(ok.x, grid, off.wq, off.scale, Tensor(), state_keeping_integers()),
                      Contains("test_layer") && Contains("not on its int8 grid"));
}

namespace {
// Two identical observed weight quantizers (8-bit symmetric; per_channel or
// not; `method` minmax or moving_average).
std::shared_ptr<FakeQuantizer> weight_quantizer(bool per_channel, int64_t channels, QuantMethod method, SteKind ste) {
  QuantizerConfig cfg;
  cfg.spec.per_channel = per_channel;
  cfg.method = method;
  cfg.ste = ste;
  cfg.is_weight = true;
  return make_fake_quantizer(cfg, per_channel ? channels : 1);
}

// What a layer computes from (x, w) through `fq`, either as
// fake_quantize(w) -> int8 op, or as forward_codes(w) -> int8 op.
struct LayerRun {
  Tensor y, dx, dw, db;
  QParams q;
  std::vector<int64_t> clipped;
};
LayerRun run_layer(const Tensor& x0, const ActGrid& grid, const Tensor& w0, const Tensor& b0, const Tensor& gy,
                   FakeQuantizer& fq, bool codes, const Conv2dParams* conv) {
  Tensor x = x0.clone().set_requires_grad(true), w = w0.clone().set_requires_grad(true);
  Tensor b = b0.clone().set_requires_grad(true);
  auto st = state_keeping_integers();
  LayerRun r;
  Tensor y;
  if (codes) {
    auto c = std::make_shared<QuantCodes>();
    REQUIRE(fq.forward_codes(w, *c, "int8 training: layer test_layer"));
    r.clipped = c->clipped;
    y = conv ? int8_conv2d(x, grid, w, c, b, *conv, st) : int8_linear(x, grid, w, c, b, st);
  } else {
    Tensor wq = fq.forward(w);
    y = conv ? int8_conv2d(x, grid, wq, fq.qparams().scale, b, *conv, st)
             : int8_linear(x, grid, wq, fq.qparams().scale, b, st);
  }
  sum(mul(y, gy)).backward();
  r.y = y.detach(), r.dx = x.grad(), r.dw = w.grad(), r.db = b.grad(), r.q = fq.qparams();
  return r;
}
}  // namespace

// The INT8 layers' weight path without the float fake-quantized tensor
// (FakeQuantizer::forward_codes): the same integers, so the same outputs and
// gradients bit for bit, the clipped STE included, and the same qparams and
// observer state, with the observer on (fused per-channel, per-tensor) and off.
TEST_CASE("INT8 layers fed with weight codes equal those fed with the fake-quantized weight bit for bit",
          "[quant][int8train]") {
  Generator g(12);
  const ActGrid grid{0.05f, 0.0, 256};
  const Conv2dParams p{1, 1, 1, 1, 1, 1, 1};
  for (const bool per_channel : {true, false})
    for (const bool is_conv : {true, false})
      for (const SteKind ste : {SteKind::clipped, SteKind::plain}) {
        INFO("per_channel " << per_channel << " conv " << is_conv << " ste " << static_cast<int>(ste));
        const Shape ws = is_conv ? Shape{6, 3, 3, 3} : Shape{6, 37};
        const OnGrid in = on_grid(is_conv ? Shape{2, 3, 5, 5} : Shape{4, 37}, grid, g);
        Tensor w = Tensor::randn(ws, g), b = Tensor::randn({6}, g);
        auto fq_float = weight_quantizer(per_channel, 6, QuantMethod::moving_average, ste);
        auto fq_codes = weight_quantizer(per_channel, 6, QuantMethod::moving_average, ste);
        for (auto* fq : {fq_float.get(), fq_codes.get()}) fq->train();
        for (int step = 0; step < 3; ++step) {
          if (step == 2)  // observer off: the stored qparams
            for (auto* fq : {fq_float.get(), fq_codes.get()}) fq->set_observer_enabled(false);
          Tensor wstep = mul(w, Tensor::full({1}, 1.f + 0.25f * static_cast<float>(step)));
          const Tensor x = in.x;
          Tensor gy;
          {
            NoGradGuard ng;
            const Shape ys = is_conv ? Shape{2, 6, 5, 5} : Shape{4, 6};
            gy = Tensor::randn(ys, g);
          }
          const LayerRun a = run_layer(x, grid, wstep, b, gy, *fq_float, false, is_conv ? &p : nullptr);
          const LayerRun c = run_layer(x, grid, wstep, b, gy, *fq_codes, true, is_conv ? &p : nullptr);
          REQUIRE(testing::same_bits(c.y, a.y));
          REQUIRE(testing::same_bits(c.dx, a.dx));
          REQUIRE(testing::same_bits(c.dw, a.dw));
          REQUIRE(testing::same_bits(c.db, a.db));
          REQUIRE(testing::same_bits(c.q.scale, a.q.scale));
          REQUIRE(testing::same_bits(c.q.zero_point, a.q.zero_point));
          // The scale max|w| / 127.5 puts a row's positive maximum on 127.5,
          // which rounds to 128: clipped, its gradient stopped.
          if (ste == SteKind::clipped && per_channel && step < 2) REQUIRE(!c.clipped.empty());
          if (ste == SteKind::plain) REQUIRE(c.clipped.empty());
          for (const int64_t i : c.clipped) REQUIRE(c.dw.data<float>()[i] == 0.f);
        }
        const NamedTensors bf = fq_float->named_buffers(), bc = fq_codes->named_buffers();
        REQUIRE(bf.size() == bc.size());
        for (size_t i = 0; i < bf.size(); ++i) {
          INFO(bf[i].first);
          REQUIRE(bc[i].first == bf[i].first);
          REQUIRE(testing::same_bits(bc[i].second, bf[i].second));
        }
      }
}

// Rows longer than the AVX-512 kernel's 2^16-value chunks (its int32 lane
// sums restart per chunk), clipped values at a chunk's edge: the integers,
// row sums and clipped indices equal those computed here from the same
// float arithmetic (nearbyint(w * (1/s)), clamped).
TEST_CASE("INT8 weight codes of rows longer than 2^16 values equal the scalar rule", "[quant][int8train]") {
  Generator g(15);
  const int64_t R = 2, L = 70001;
  Tensor w = Tensor::randn({R, L}, g);
  w.data<float>()[65535] = 50.f, w.data<float>()[65536] = -50.f, w.data<float>()[L + 65537] = 60.f;  // clipped
  QuantSpec spec;
  spec.per_channel = true;
  const QParams q{Tensor::from_vector({0.02f, 0.03f}, {2}), Tensor::from_vector_i32({0, 0}, {2})};
  QuantCodes codes;
  quantize_codes(w, q, spec, SteKind::clipped, codes, "test");
  std::vector<int64_t> want_clipped;
  bool same = true;
  for (int64_t r = 0; r < R; ++r) {
    const float inv = 1.0f / q.scale.data<float>()[r];
    int64_t sum = 0;
    for (int64_t i = 0; i < L; ++i) {
      const float t = std::nearbyint(w.data<float>()[r * L + i] * inv);
      if (t < -128.f || t > 127.f) want_clipped.push_back(r * L + i);
      const int v = static_cast<int>(std::clamp(t, -128.f, 127.f));
      same = same && codes.q[static_cast<size_t>(r * L + i)] == v;
      sum += v;
    }
    same = same && codes.rowsum[static_cast<size_t>(r)] == sum;
  }
  REQUIRE(same);
  REQUIRE(codes.clipped == want_clipped);
  REQUIRE(want_clipped.size() >= 3);
}

TEST_CASE("INT8 weight codes refuse a non-finite weight naming the layer and the index", "[quant][int8train]") {
  auto fq = weight_quantizer(true, 3, QuantMethod::minmax, SteKind::clipped);
  fq->train();
  Generator g(13);
  Tensor w = Tensor::randn({3, 40}, g);
  w.data<float>()[57] = std::nanf("");
  QuantCodes codes;
  REQUIRE_THROWS_WITH(fq->forward_codes(w, codes, "int8 training: layer fc1"),
                      Contains("fc1") && Contains("index 57") && Contains("not finite"));
  w.data<float>()[57] = 1.f;
  fq->set_observer_enabled(false);
  w.data<float>()[81] = -std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_WITH(fq->forward_codes(w, codes, "int8 training: layer fc1"),
                      Contains("fc1") && Contains("index 81") && Contains("not finite"));
}

namespace {
// Losses of 40 SGD steps on one batch of a prepared SmallCNN, INT8 or not.
std::vector<float> small_cnn_losses(bool int8, std::vector<Int8Layer>* layers_out = nullptr) {
  ModulePtr m = make_model("small_cnn", 4, 1);
  prepare(*m, testing::test_backend("default"), QConfig{});
  std::vector<Int8Layer> layers;
  if (int8) layers = enable_int8_training(*m, Int8GradConfig{}, {}, 11);
  Generator g(6);
  Tensor x = Tensor::randn({16, 3, 12, 12}, g);
  Tensor labels = Tensor::from_vector_i32({0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, {16});
  m->train();
  std::vector<float> losses;
  for (int step = 0; step < 40; ++step) {
    for (auto& [n, p] : m->named_parameters()) p.zero_grad();
    Tensor loss = cross_entropy(m->forward(x), labels);
    loss.backward();
    NoGradGuard ng;
    for (auto& [n, p] : m->named_parameters())
      if (p.grad().defined()) p.add_(p.grad(), -0.3f);
    losses.push_back(loss.item());
  }
  if (layers_out) *layers_out = layers;
  return losses;
}
}  // namespace

TEST_CASE("a prepared SmallCNN trains in INT8 with every quantized layer on integers and its loss falls",
          "[quant][int8train]") {
  std::vector<Int8Layer> layers;
  const std::vector<float> int8 = small_cnn_losses(true, &layers);
  const std::vector<float> fp = small_cnn_losses(false);
  std::vector<std::string> names;
  for (auto& l : layers) names.push_back(l.name);
  REQUIRE(names == std::vector<std::string>{"features.0", "features.4", "fc"});
  for (auto& l : layers) REQUIRE(l.state->steps() == 40);
  INFO("INT8 loss " << int8.front() << " -> " << int8.back() << "; float QAT " << fp.front() << " -> " << fp.back());
  // The same model and batch: the forward differs by float summation order,
  // which can move a value across a rounding boundary of the next quantizer.
  REQUIRE(int8.front() == Approx(fp.front()).epsilon(1e-3));
  REQUIRE(int8.back() < 0.5f * int8.front());
  REQUIRE(std::abs(int8.back() - fp.back()) < 0.1f * fp.front());  // tracks float QAT
}

TEST_CASE("INT8 training refuses layers it cannot run and names them", "[quant][int8train]") {
  SECTION("affine weights") {
    ModulePtr m = make_model("small_cnn", 4, 1);
    QConfig q;
    q.weight_symmetric = false;
    prepare(*m, testing::test_backend("default"), q);
    REQUIRE_THROWS_WITH(enable_int8_training(*m, Int8GradConfig{}, {}, 0),
                        Contains("features.0") && Contains("symmetric weights"));
  }
  SECTION("an unknown keep_float layer") {
    ModulePtr m = make_model("small_cnn", 4, 1);
    prepare(*m, testing::test_backend("default"), QConfig{});
    REQUIRE_THROWS_WITH(enable_int8_training(*m, Int8GradConfig{}, {"features.1"}, 0),
                        Contains("keep_float") && Contains("features.1"));
  }
  SECTION("keep_float keeps a layer on float GEMMs") {
    ModulePtr m = make_model("small_cnn", 4, 1);
    prepare(*m, testing::test_backend("default"), QConfig{});
    const auto layers = enable_int8_training(*m, Int8GradConfig{}, {"features.0", "fc"}, 0);
    REQUIRE(layers.size() == 1);
    REQUIRE(layers[0].name == "features.4");
  }
}

namespace {
// A process of a data-parallel job, for the noise key only.
class RankOf2 final : public Collective {
 public:
  explicit RankOf2(int r) : r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return 2; }
  void sum(double*, int64_t) override {}
  void sum(float*, int64_t) override {}
  void min(float*, int64_t) override {}
  void max(float*, int64_t) override {}

 private:
  int r_;
};
}  // namespace

TEST_CASE("INT8 gradient noise: rank 0 keeps the single-process stream, other ranks draw their own",
          "[int8_training]") {
  Int8GradState st(Int8GradConfig{}, 5, "layer");
  const uint64_t alone0 = st.noise_key(0), alone1 = st.noise_key(1);
  RankOf2 rank0(0), rank1(1);
  set_collective(&rank0);
  const uint64_t r0 = st.noise_key(0), r0x = st.noise_key(1);
  set_collective(&rank1);
  const uint64_t r1 = st.noise_key(0), r1x = st.noise_key(1);
  set_collective(nullptr);
  CHECK(r0 == alone0);
  CHECK(r0x == alone1);
  CHECK(r1 != alone0);
  CHECK(r1x != alone1);
  CHECK(r1 != r1x);
}

namespace {
// `steps` SGD steps (lr 0.1) of a classifier on one batch.
void sgd_steps(Module& m, const Tensor& x, const Tensor& labels, int steps) {
  m.train();
  for (int step = 0; step < steps; ++step) {
    for (auto& [n, p] : m.named_parameters()) p.zero_grad();
    cross_entropy(m.forward(x), labels).backward();
    NoGradGuard ng;
    for (auto& [n, p] : m.named_parameters())
      if (p.grad().defined()) p.add_(p.grad(), -0.1f);
  }
}
}  // namespace

// AlexNet's classifier: Dropout(p) between a quantizer and an INT8 linear.
// In training the dropout scales kept values by 1/(1-p), so the linear reads
// the grid s/(1-p); on the grid s it would find every kept value off-grid.
TEST_CASE("INT8 training runs a linear layer behind a dropout on the dropout's grid", "[quant][int8train]") {
  Generator g(1);
  auto m = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(Conv2dOptions{3, 8, 3, 1, 1, 1, 1, true}, g), std::make_shared<ReLU>(),
      std::make_shared<AdaptiveAvgPool2d>(2, 2), std::make_shared<Flatten>(),
      std::make_shared<Dropout>(0.5f, std::make_shared<Generator>(3)), std::make_shared<Linear>(32, 4, g)});
  prepare(*m, testing::test_backend("default"), QConfig{});
  Generator gx(6);
  const Tensor x = Tensor::randn({8, 3, 8, 8}, gx);
  const Tensor labels = Tensor::from_vector_i32({0, 1, 2, 3, 0, 1, 2, 3}, {8});
  sgd_steps(*m, x, labels, 2);  // observers initialised
  const auto layers = enable_int8_training(*m, Int8GradConfig{}, {}, 11);
  REQUIRE(layers.size() == 2);
  REQUIRE_NOTHROW(sgd_steps(*m, x, labels, 3));
  for (const auto& l : layers) CHECK(l.state->steps() == 3);
}

// LSQ+ activations: the grid's zero is -qmin - offset / step, fractional once
// the offset has moved; fc (behind features.4's quantizer) must read it.
TEST_CASE("INT8 training reads an LSQ+ activation grid with a fractional zero point", "[quant][int8train]") {
  ModulePtr m = make_model("small_cnn", 4, 1);
  QConfig q;
  q.method = QuantMethod::lsq_plus;
  prepare(*m, testing::test_backend("default"), q);
  Generator gx(6);
  const Tensor x = Tensor::randn({16, 3, 12, 12}, gx);
  const Tensor labels = Tensor::from_vector_i32({0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, {16});
  sgd_steps(*m, x, labels, 5);
  for (auto& [n, mod] : m->named_modules())
    if (auto* fq = dynamic_cast<FakeQuantizer*>(mod); fq && n == "features.4.activation_post_process") {
      Tensor b = fq->learned_offset();
      REQUIRE(b.defined());
      NoGradGuard ng;
      b.fill_(0.3f * fq->qparams().scale.data<float>()[0]);  // a third of a step
    }
  // (the padded convolutions are refused under LSQ+ on the CPU: fc alone runs in INT8)
  const auto layers = enable_int8_training(*m, Int8GradConfig{}, {"features.0", "features.4"}, 11);
  REQUIRE(layers.size() == 1);
  REQUIRE_NOTHROW(sgd_steps(*m, x, labels, 3));
  CHECK(layers[0].state->steps() == 3);
}

TEST_CASE("INT8 layers draw their stochastic rounding from streams of their own", "[quant][int8train]") {
  ModulePtr m = make_model("small_cnn", 4, 1);
  prepare(*m, testing::test_backend("default"), QConfig{});
  const auto layers = enable_int8_training(*m, Int8GradConfig{}, {}, 11);
  REQUIRE(layers.size() == 3);
  for (int which = 0; which < 2; ++which) {
    CHECK(layers[0].state->noise_key(which) != layers[1].state->noise_key(which));
    CHECK(layers[1].state->noise_key(which) != layers[2].state->noise_key(which));
    CHECK(layers[0].state->noise_key(which) != layers[2].state->noise_key(which));
  }
}

TEST_CASE("an INT8 input one step past either end of its grid is refused, the ends are not", "[quant][int8train]") {
  using int8_math::input_integer;
  // scale 0.5 (inv 2), zero 0, 256 levels
  CHECK(input_integer(0.f, 2.0, 0.0, 256) == 0);
  CHECK(input_integer(127.5f, 2.0, 0.0, 256) == 255);
  CHECK(input_integer(128.f, 2.0, 0.0, 256) == -1);  // 256: would wrap to 0 as a byte
  CHECK(input_integer(-0.5f, 2.0, 0.0, 256) == -1);
  CHECK(input_integer(15.f, 1.0, 0.0, 16) == 15);
  CHECK(input_integer(16.f, 1.0, 0.0, 16) == -1);
}

namespace {
// A heavy-tailed gradient (cubes of normals, times `size`): the searched clip
// is well inside max|g|, so a search and a tracked clip differ.
Tensor heavy_tailed(const Shape& shape, float size, Generator& g) {
  Tensor t = Tensor::randn(shape, g);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.data<float>()[i];
    t.data<float>()[i] = size * v * v * v;
  }
  return t;
}
float max_abs_of(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}
}  // namespace

// Issue 40: the period's clock and the clips between searches were
// unguarded (searching one step late, or dX's clip following dW's ratio,
// passed every test). Through the op: at steps 0, P, 2P each clip is the
// searched one of that step's values (dW's: dY; dX's: dY * s_w[o]); between,
// that quantizer's own last searched ratio times this step's max|values|.
TEST_CASE("the direction-sensitive clips are searched at steps 0, P, 2P and each follows its own ratio between",
          "[quant][int8train]") {
  Generator g(11);
  const ActGrid grid{0.04f, 0.0, 256};
  const int64_t N = 64, K = 33, O = 16, P = 3;
  Int8GradConfig cfg;
  cfg.bits = 4;  // (4-bit gradients clip well inside max|g|)
  cfg.period = P;
  auto st = std::make_shared<Int8GradState>(cfg, 5, "lin");
  const OnGrid in = on_grid({N, K}, grid, g);
  const Weights w = int8_weights({O, K}, g);
  float ratio[2] = {0, 0};
  int searched = 0, tracked = 0;
  for (int64_t s = 0; s < 3 * P + 1; ++s) {
    INFO("step " << s);
    Tensor x = in.x.clone().set_requires_grad(true);
    Tensor wq = w.wq.clone().set_requires_grad(true);
    const Tensor gy = heavy_tailed({N, O}, std::pow(10.f, static_cast<float>(s % 3) - 1.f), g);
    sum(mul(int8_linear(x, grid, wq, w.scale, Tensor(), st), gy)).backward();
    std::vector<float> values[2] = {gy.to_vector(), gy.to_vector()};
    for (size_t i = 0; i < values[1].size(); ++i) values[1][i] *= w.scale.data<float>()[i % O];
    const bool search = s % P == 0;
    for (int q = 0; q < 2; ++q) {
      INFO((q == 0 ? "dW's quantizer" : "dX's quantizer"));
      const float m = max_abs_of(values[q]);
      float want = 0;
      if (search) {
        const float c = search_clip(values[q].data(), static_cast<int64_t>(values[q].size()), cfg.bits).clip;
        want = usable_clip(c, cfg.bits);
        ratio[q] = c / m;
      } else {
        want = usable_clip(ratio[q] * m, cfg.bits);
      }
      REQUIRE(ratio[q] < 0.9f);  // the search clipped: a search and a tracked clip tell apart
      CHECK(st->clip(q) == want);
    }
    REQUIRE(std::fabs(ratio[0] - ratio[1]) > 0.01f);  // the two ratios tell apart
    searched += search;
    tracked += !search;
    CHECK(st->steps() == s + 1);
  }
  CHECK(searched == 4);
  CHECK(tracked == 6);
}

// The same rule on the state alone, with ratios far apart.
TEST_CASE("between searches each gradient quantizer's clip follows its own searched ratio", "[quant][int8train]") {
  Generator g(12);
  Int8GradConfig cfg;
  cfg.bits = 4;
  cfg.period = 4;
  Int8GradState st(cfg, 1, "layer");
  const std::vector<float> ga = Tensor::randn({4096}, g).to_vector();                  // light tails
  const std::vector<float> gb = heavy_tailed({4096}, 1.f, g).to_vector();              // heavy tails
  REQUIRE(st.clip_due(0));
  REQUIRE(st.clip_due(1));
  st.refresh_clip(0, ga.data(), static_cast<int64_t>(ga.size()));
  st.refresh_clip(1, gb.data(), static_cast<int64_t>(gb.size()));
  st.finish_step(true, true);
  const float ra = st.clip(0) / max_abs_of(ga), rb = st.clip(1) / max_abs_of(gb);
  INFO("ratios " << ra << " and " << rb);
  REQUIRE(std::fabs(ra - rb) > 0.1f);
  for (int step = 1; step < 4; ++step) {
    REQUIRE_FALSE(st.clip_due(0));
    REQUIRE_FALSE(st.clip_due(1));
    const float ma = 2.f * static_cast<float>(step), mb = 3.f * static_cast<float>(step);
    st.track_clip(0, ma);
    st.track_clip(1, mb);
    CHECK(st.clip(0) == usable_clip(ra * ma, cfg.bits));
    CHECK(st.clip(1) == usable_clip(rb * mb, cfg.bits));
    st.finish_step(true, true);
  }
  CHECK(st.clip_due(0));  // step 4 = P: searched again
  CHECK(st.clip_due(1));
}
