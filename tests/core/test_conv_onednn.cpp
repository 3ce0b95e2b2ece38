// conv2d's forward and backward through oneDNN (Note [oneDNN convolutions])
// on two threads against a direct convolution in double precision: every
// output, dX and dW element within the float summation error bound
// (terms + 1) u sum|terms|, u = 2^-24 (dW: twice that, for sums split over
// threads and then added). The shapes qat's networks have (a 7x7 map, a
// stride-4 11x11 stem, with and without bias) and the ones a model file or
// an ONNX import may bring: groups that are not depthwise, dilation,
// rectangular kernels and strides, and a stride that leaves input columns
// unread at the right and bottom (oneDNN's right padding is then negative).
#include <cmath>

#include "core/ops/conv2d.h"
#include "core/threads.h"
#include "tests/test_util.h"

using namespace qat;

namespace {

// Sum of terms in double with its magnitude, checked against a float result.
struct Acc {
  double sum = 0, mag = 0;
  int64_t terms = 0;
  void add(double t) { sum += t, mag += std::abs(t), ++terms; }
  double ratio(float got, int sums = 1) const {
    const double bound = sums * static_cast<double>(terms + 1) * std::ldexp(1.0, -24) * mag;
    return bound == 0 ? (got == 0 ? 0 : 1e30) : std::abs(got - sum) / bound;
  }
};

struct ConvCase {
  const char* name;
  Shape x, w;  // w: (O, C / groups, KH, KW)
  Conv2dParams p;
  bool bias;
};

struct Sums {
  std::vector<Acc> y, dx, dw;
};

// The double sums of y, dx and dw, term by term.
Sums reference(const ConvCase& k, const float* px, const float* pw, const float* pb, const float* pg, int64_t OH,
               int64_t OW) {
  const int64_t N = k.x[0], C = k.x[1], H = k.x[2], W = k.x[3], O = k.w[0], Cg = k.w[1], KH = k.w[2], KW = k.w[3];
  const int64_t Og = O / k.p.groups;
  Sums s{std::vector<Acc>(static_cast<size_t>(N * O * OH * OW)), std::vector<Acc>(static_cast<size_t>(N * C * H * W)),
         std::vector<Acc>(static_cast<size_t>(O * Cg * KH * KW))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          const int64_t i = ((n * O + o) * OH + oy) * OW + ox;
          if (pb) s.y[i].add(pb[o]);
          for (int64_t cl = 0; cl < Cg; ++cl)
            for (int64_t ky = 0; ky < KH; ++ky)
              for (int64_t kx = 0; kx < KW; ++kx) {
                const int64_t iy = oy * k.p.stride_h - k.p.pad_h + ky * k.p.dil_h;
                const int64_t ix = ox * k.p.stride_w - k.p.pad_w + kx * k.p.dil_w;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                const int64_t c = o / Og * Cg + cl;
                const int64_t xi = ((n * C + c) * H + iy) * W + ix, wi = ((o * Cg + cl) * KH + ky) * KW + kx;
                s.y[i].add(double{pw[wi]} * px[xi]);
                s.dx[xi].add(double{pw[wi]} * pg[i]);
                s.dw[wi].add(double{px[xi]} * pg[i]);
              }
        }
  return s;
}

double worst(const std::vector<Acc>& want, const float* got, int sums) {
  double r = 0;
  for (size_t i = 0; i < want.size(); ++i) r = std::max(r, want[i].ratio(got[i], sums));
  return r;
}

void check_case(const ConvCase& k) {
  INFO(k.name);
  Generator g(11);
  const Tensor x = Tensor::randn(k.x, g).set_requires_grad(true);
  const Tensor w = Tensor::randn(k.w, g).set_requires_grad(true);
  const Tensor b = k.bias ? Tensor::randn({k.w[0]}, g) : Tensor();
  set_num_threads(2);
  Tensor y = conv2d(x, w, b, k.p);
  const Tensor gy = Tensor::randn(y.sizes(), g);
  y.backward(gy);
  set_num_threads(1);
  const Sums want = reference(k, x.data<float>(), w.data<float>(), k.bias ? b.data<float>() : nullptr, gy.data<float>(),
                              y.size(2), y.size(3));
  CHECK(worst(want.y, y.data<float>(), 1) <= 1.0);
  CHECK(worst(want.dx, x.grad().data<float>(), 1) <= 1.0);
  CHECK(worst(want.dw, w.grad().data<float>(), 2) <= 1.0);
}

}  // namespace

TEST_CASE("conv2d forward and backward through oneDNN equal a double-precision convolution within the float bound",
          "[ops][conv]") {
  const std::vector<ConvCase> cases = {
      {"26x26 maps, 3x3 pad 1", {5, 3, 26, 26}, {8, 3, 3, 3}, {1, 1, 1, 1}, false},
      {"7x7 maps, 33 images", {33, 16, 7, 7}, {24, 16, 3, 3}, {1, 1, 1, 1}, true},
      {"AlexNet's conv1: 11x11 stride 4 pad 2", {20, 3, 35, 35}, {16, 3, 11, 11}, {4, 4, 2, 2}, true},
      {"2 groups of 4 channels, 3x3 pad 1", {3, 8, 9, 9}, {6, 4, 3, 3}, {1, 1, 1, 1, 1, 1, 2}, true},
      {"dilation 2, pad 2", {2, 5, 12, 10}, {7, 5, 3, 3}, {1, 1, 2, 2, 2, 2}, false},
      {"3x2 kernel, stride (2, 3), pad (1, 0)", {2, 4, 11, 13}, {5, 4, 3, 2}, {2, 3, 1, 0}, true},
      {"1x1 stride 2 on 6x6: the last row and column unread", {3, 6, 6, 6}, {4, 6, 1, 1}, {2, 2, 0, 0}, false},
  };
  for (const ConvCase& k : cases) check_case(k);
}

