// 1x1 convolutions (through oneDNN, Note [oneDNN convolutions]) on small
// maps (MobileNetV2's 4x4 and 8x8 stages at 32 px), a map of 512 positions
// and fewer images than threads. Against a double reference within the
// float-sum bound (float_sum_bounds.h), and two threads against one: the
// output and the input gradient the same bits (the threads split the
// outputs, not a sum), the weight gradient within the bound of its N x P
// terms.
#include "tests/test_util.h"

#include "core/ops/conv2d.h"
#include "tests/core/float_sum_bounds.h"

using namespace qat;
using namespace qat::testing;

namespace {

struct PointwiseCase {
  const char* name;
  Shape x, w;  // w: (O, C, 1, 1)
  bool bias;
};

// y = w x + b, dx = w^T g, dw = sum over images and positions of g x^T, db
// = sum of g: in double, rounded once.
OpRun reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g) {
  const int64_t N = x.size(0), C = x.size(1), P = x.size(2) * x.size(3), O = w.size(0);
  const std::vector<float> xv = x.to_vector(), wv = w.to_vector(), gv = g.to_vector();
  const std::vector<float> bv = b.defined() ? b.to_vector() : std::vector<float>(static_cast<size_t>(O), 0.f);
  std::vector<float> y(static_cast<size_t>(N * O * P)), dx(static_cast<size_t>(N * C * P)),
      dw(static_cast<size_t>(O * C)), db(static_cast<size_t>(O));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t o = 0; o < O; ++o) {
        double s = bv[o];
        for (int64_t c = 0; c < C; ++c) s += double{wv[o * C + c]} * xv[(n * C + c) * P + p];
        y[(n * O + o) * P + p] = static_cast<float>(s);
      }
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t o = 0; o < O; ++o) s += double{wv[o * C + c]} * gv[(n * O + o) * P + p];
        dx[(n * C + c) * P + p] = static_cast<float>(s);
      }
    }
  for (int64_t o = 0; o < O; ++o) {
    double sb = 0;
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < P; ++p) s += double{gv[(n * O + o) * P + p]} * xv[(n * C + c) * P + p];
      dw[o * C + c] = static_cast<float>(s);
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < P; ++p) sb += gv[(n * O + o) * P + p];
    db[o] = static_cast<float>(sb);
  }
  return {Tensor::from_vector(y, g.sizes()),
          {Tensor::from_vector(dx, x.sizes()), Tensor::from_vector(dw, w.sizes()), Tensor::from_vector(db, {O})}};
}

}  // namespace

TEST_CASE("1x1 convolutions: on two threads as on one, and as the double reference", "[ops][conv]") {
  const std::vector<PointwiseCase> cases = {
      {"4x4 images, 8 of them: an image a thread", {8, 24, 4, 4}, {40, 24, 1, 1}, true},
      {"8x8 images, an odd count of 3, no bias", {3, 5, 8, 8}, {7, 5, 1, 1}, false},
      {"16x32 images (512 positions): a GEMM an image on both threads", {2, 3, 16, 32}, {4, 3, 1, 1}, true},
      {"one image: fewer than the threads", {1, 6, 4, 4}, {9, 6, 1, 1}, true},
  };
  uint64_t seed = 700;
  for (const PointwiseCase& k : cases) {
    INFO(k.name);
    const Tensor x = rand_tensor(k.x, seed, false), w = rand_tensor(k.w, seed + 1, false);
    const Tensor b = k.bias ? rand_tensor({k.w[0]}, seed + 2, false) : Tensor();
    seed += 10;
    const OpFn op = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], Conv2dParams{}); };
    const Tensor g = rand_tensor({k.x[0], k.w[0], k.x[2], k.x[3]}, seed + 3, false);
    OpRun two, one;
    {
      ThreadsGuard threads(2);
      two = run_op(op, {x, w, b}, g, Device::cpu);
    }
    {
      ThreadsGuard threads(1);
      one = run_op(op, {x, w, b}, g, Device::cpu);
    }
    const OpRun want = reference(x, w, b, g);
    const OpRun mag = run_abs(op, {x, w, b}, g);
    const int64_t C = k.x[1], O = k.w[0], NP = k.x[0] * k.x[2] * k.x[3];
    REQUIRE(two.y.to_vector() == one.y.to_vector());
    REQUIRE(two.grads[0].to_vector() == one.grads[0].to_vector());
    check_within(two.grads[1], one.grads[1], sum_bound(mag.grads[1], NP), "weight gradient, two threads vs one");
    for (const OpRun* r : {&two, &one}) {
      check_within(r->y, want.y, sum_bound(mag.y, C + 1), "output");
      check_within(r->grads[0], want.grads[0], sum_bound(mag.grads[0], O), "input gradient");
      check_within(r->grads[1], want.grads[1], sum_bound(mag.grads[1], NP), "weight gradient");
      if (k.bias) check_within(r->grads[2], want.grads[2], sum_bound(mag.grads[2], NP), "bias gradient");
    }
  }
}
