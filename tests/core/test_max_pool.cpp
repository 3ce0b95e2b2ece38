// max_pool2d's vectorised rows against the plain window scan written here:
// same values bit for bit (ties between equal values and +0 / -0 resolved to
// the first in row-major order, NaN wins and stays) and the same gradient
// routing (the argmax), over kernels, strides and paddings with edges, rows
// wide enough for several 16-output blocks of the stride-2 AVX-512 taps.
#include "tests/test_util.h"

#include <cmath>
#include <cstring>

#include "core/ops/pool.h"

using namespace qat;

namespace {

struct Scan {
  std::vector<float> y;
  std::vector<int64_t> arg;  // plane-relative input index
};

Scan scan(const std::vector<float>& x, int64_t planes, int64_t H, int64_t W, const Pool2dParams& p, int64_t OH,
          int64_t OW) {
  Scan s;
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox) {
        float b = 0;
        int64_t a = -1;
        for (int64_t ky = 0; ky < p.kernel_h; ++ky)
          for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
            const int64_t iy = oy * p.stride_h - p.pad_h + ky, ix = ox * p.stride_w - p.pad_w + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            const float v = x[(c * H + iy) * W + ix];
            if (a < 0 || v > b || (std::isnan(v) && !std::isnan(b))) b = v, a = iy * W + ix;
          }
        s.y.push_back(b);
        s.arg.push_back(a);
      }
  return s;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b)); }

}  // namespace

TEST_CASE("max_pool2d equals the plain window scan: ties, signed zeros, NaN, edges", "[ops][pool]") {
  Generator g(5);
  int cases = 0;
  for (int64_t k : {1, 2, 3, 4})
    for (int64_t s : {1, 2, 3})
      for (int64_t pad = 0; 2 * pad <= k; ++pad)
        for (int64_t H : {k, int64_t{5}, int64_t{9}})
          for (int64_t W : {k, int64_t{7}, int64_t{31}, int64_t{40}, int64_t{71}}) {
            const Pool2dParams p{k, k == 4 ? 3 : k, s, s == 3 ? 2 : s, pad, k == 4 ? 1 : pad};
            if (H + 2 * p.pad_h < p.kernel_h || W + 2 * p.pad_w < p.kernel_w || 2 * p.pad_w > p.kernel_w) continue;
            const int64_t planes = 3, OH = (H + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
            const int64_t OW = (W + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
            std::vector<float> x(static_cast<size_t>(planes * H * W));
            for (auto& v : x) {  // few distinct values: many ties; +0 and -0; rare NaN
              const int r = static_cast<int>(g.below(9));
              v = r == 0 ? 0.f : r == 1 ? -0.f : r == 2 && g.bernoulli(0.1f) ? NAN : static_cast<float>(r % 4) - 1.f;
            }
            const Scan want = scan(x, planes, H, W, p, OH, OW);
            Tensor xt = Tensor::from_vector(x, {1, planes, H, W}).set_requires_grad(true);
            Tensor y = max_pool2d(xt, p);
            REQUIRE(y.sizes() == Shape{1, planes, OH, OW});
            const std::vector<float> got = y.to_vector();
            bool values = true;
            for (size_t i = 0; i < got.size(); ++i) values = values && same_bits(got[i], want.y[i]);
            INFO("k " << p.kernel_h << "x" << p.kernel_w << " s " << p.stride_h << "x" << p.stride_w << " pad "
                      << p.pad_h << "x" << p.pad_w << " H " << H << " W " << W);
            REQUIRE(values);
            // the gradient goes to the argmax: weights 1, 2, 3, ... per output
            std::vector<float> gy(got.size()), gx(x.size(), 0.f);
            for (size_t i = 0; i < gy.size(); ++i) gy[i] = static_cast<float>(i + 1);
            for (int64_t c = 0; c < planes; ++c)
              for (int64_t o = 0; o < OH * OW; ++o)
                gx[c * H * W + want.arg[c * OH * OW + o]] += gy[c * OH * OW + o];
            y.backward(Tensor::from_vector(gy, y.sizes()));
            REQUIRE(xt.grad().to_vector() == gx);
            ++cases;
          }
  REQUIRE(cases > 100);
}
