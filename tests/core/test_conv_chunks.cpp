// conv2d's forward and backward in chunks of images on two threads (each
// chunk its own columns and single-threaded GEMMs, the weight gradient summed
// per thread) against a direct convolution in double precision: every output,
// dX and dW element within the float summation error bound
// (terms + 1) u sum|terms|, u = 2^-24 (dW: two sums, per thread then across).
// Not bit-equal to the whole-batch path: OpenBLAS's kernels for other GEMM
// widths sum in another order. One-image chunks (large outputs), multi-image
// chunks (7x7 outputs, scattered), conv1-like stride and padding, with and
// without bias.
#include "tests/test_util.h"

#include <cmath>

#include "core/ops/conv2d.h"
#include "core/threads.h"

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

void check_chunked(int64_t N, int64_t C, int64_t H, int64_t O, int64_t k, const Conv2dParams& p, bool with_bias) {
  Generator g(11);
  const Tensor x = Tensor::randn({N, C, H, H}, g).set_requires_grad(true);
  const Tensor w = Tensor::randn({O, C, k, k}, g).set_requires_grad(true);
  const Tensor b = with_bias ? Tensor::randn({O}, g) : Tensor();
  set_num_threads(2);
  Tensor y = conv2d(x, w, b, p);  // several chunks, two threads
  const Tensor gy = Tensor::randn(y.sizes(), g);
  y.backward(gy);
  set_num_threads(1);
  const int64_t OH = y.size(2), OW = y.size(3);
  const float *px = x.data<float>(), *pw = w.data<float>(), *py = y.data<float>(), *pg = gy.data<float>();
  std::vector<Acc> ey(y.numel()), edx(x.numel()), edw(w.numel());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          const int64_t i = ((n * O + o) * OH + oy) * OW + ox;
          if (with_bias) ey[i].add(b.data<float>()[o]);
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = oy * p.stride_h - p.pad_h + ky, ix = ox * p.stride_w - p.pad_w + kx;
                if (iy < 0 || iy >= H || ix < 0 || ix >= H) continue;
                const int64_t xi = ((n * C + c) * H + iy) * H + ix, wi = ((o * C + c) * k + ky) * k + kx;
                ey[i].add(double{pw[wi]} * px[xi]);
                edx[xi].add(double{pw[wi]} * pg[i]);
                edw[wi].add(double{px[xi]} * pg[i]);
              }
        }
  auto worst = [](const std::vector<Acc>& want, const float* got, int sums) {
    double r = 0;
    for (size_t i = 0; i < want.size(); ++i) r = std::max(r, want[i].ratio(got[i], sums));
    return r;
  };
  INFO("N " << N << " C " << C << " H " << H << " O " << O << " k " << k << " bias " << with_bias);
  CHECK(worst(ey, py, 1) <= 1.0);
  CHECK(worst(edx, x.grad().data<float>(), 1) <= 1.0);
  CHECK(worst(edw, w.grad().data<float>(), 2) <= 1.0);
}

}  // namespace

TEST_CASE("conv2d forward and backward in image chunks equal a double-precision convolution within the float bound",
          "[ops][conv]") {
  for (const bool bias : {false, true}) {
    check_chunked(5, 3, 26, 8, 3, Conv2dParams{1, 1, 1, 1}, bias);          // 26x26 outputs: chunks of one
    check_chunked(33, 16, 7, 24, 3, Conv2dParams{1, 1, 1, 1, 1, 1}, bias);  // 7x7: 4 chunks (9, 8, 8, 8), scattered
    check_chunked(20, 3, 35, 16, 11, Conv2dParams{4, 4, 2, 2}, bias);       // conv1-like: 8x8 outputs, 4 chunks of 5
  }
}
