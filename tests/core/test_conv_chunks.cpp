// conv2d's forward in chunks of images on the threads (each chunk its own
// columns and a single-threaded GEMM) against a direct convolution in double
// precision: each output within the float dot-product error bound
// (K + 1) u sum|w x| (+ |b|), u = 2^-24. Not bit-equal to the whole-batch
// path: OpenBLAS's kernels for other GEMM widths sum in another order.
// One-image chunks (large outputs), multi-image chunks (7x7 outputs,
// scattered), conv1-like stride and padding, with and without bias.
#include "tests/test_util.h"

#include <cmath>

#include "core/ops/conv2d.h"
#include "core/threads.h"

using namespace qat;

namespace {

void check_chunked(int64_t N, int64_t C, int64_t H, int64_t O, int64_t k, const Conv2dParams& p, bool with_bias) {
  Generator g(11);
  const Tensor x = Tensor::randn({N, C, H, H}, g), w = Tensor::randn({O, C, k, k}, g);
  const Tensor b = with_bias ? Tensor::randn({O}, g) : Tensor();
  set_num_threads(2);
  const Tensor y = conv2d(x, w, b, p);  // several chunks, two threads
  set_num_threads(1);
  const int64_t OH = y.size(2), OW = y.size(3), K = C * k * k;
  const float *px = x.data<float>(), *pw = w.data<float>(), *py = y.data<float>();
  int64_t worst_at = -1;
  double worst = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double sum = with_bias ? b.data<float>()[o] : 0.0, mag = std::abs(sum);
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = oy * p.stride_h - p.pad_h + ky, ix = ox * p.stride_w - p.pad_w + kx;
                if (iy < 0 || iy >= H || ix < 0 || ix >= H) continue;
                const double t = double{pw[((o * C + c) * k + ky) * k + kx]} * px[((n * C + c) * H + iy) * H + ix];
                sum += t, mag += std::abs(t);
              }
          const int64_t i = ((n * O + o) * OH + oy) * OW + ox;
          const double ratio = std::abs(py[i] - sum) / (static_cast<double>(K + 1) * std::ldexp(1.0, -24) * mag);
          if (ratio > worst) worst = ratio, worst_at = i;
        }
  INFO("N " << N << " C " << C << " H " << H << " O " << O << " k " << k << " bias " << with_bias
            << ": worst error / bound " << worst << " at " << worst_at);
  REQUIRE(worst <= 1.0);
}

}  // namespace

TEST_CASE("conv2d forward in image chunks equals a double-precision convolution within the float bound",
          "[ops][conv]") {
  for (const bool bias : {false, true}) {
    check_chunked(5, 3, 26, 8, 3, Conv2dParams{1, 1, 1, 1}, bias);          // 26x26 outputs: chunks of one
    check_chunked(33, 16, 7, 24, 3, Conv2dParams{1, 1, 1, 1, 1, 1}, bias);  // 7x7: chunks of 11, scattered
    check_chunked(20, 3, 35, 16, 11, Conv2dParams{4, 4, 2, 2}, bias);       // conv1-like: 8x8 outputs, chunks of 8
  }
}
