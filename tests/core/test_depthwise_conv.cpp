// The direct depthwise kernel (Note [depthwise kernel]) against the dense
// convolution with the block-diagonal weight it stands for: output channel o
// reads input channel o / m only, so W_dense[o, o / m] = w[o] and every other
// input channel is zero. The dense conv2d (oneDNN's) adds the same
// non-zero terms plus exact zeros, so the two agree within the float-sum
// bound of float_sum_bounds.h; a wrong tap, stride phase or channel breaks it
// by orders of magnitude. On two threads, for stride, padding, dilation,
// multiplier 2, non-square kernels and rows longer than a vector.
#include "tests/test_util.h"

#include "core/ops/conv2d.h"
#include "tests/core/float_sum_bounds.h"

using namespace qat;
using namespace qat::testing;

namespace {

struct DepthwiseCase {
  const char* name;
  Shape x, w;  // w: (O, 1, KH, KW), O a multiple of C
  Conv2dParams p;
  bool bias;
};

// (O, C, KH, KW) with w[o] on input channel o / m and zeros elsewhere.
Tensor block_diagonal(const Tensor& w, int64_t c) {
  const int64_t o = w.size(0), m = o / c, t = w.size(2) * w.size(3);
  const std::vector<float> src = w.to_vector();
  std::vector<float> dense(static_cast<size_t>(o * c * t), 0.f);
  for (int64_t oc = 0; oc < o; ++oc)
    for (int64_t i = 0; i < t; ++i) dense[(oc * c + oc / m) * t + i] = src[oc * t + i];
  return Tensor::from_vector(dense, {o, c, w.size(2), w.size(3)});
}

// The diagonal blocks of a dense (O, C, KH, KW) gradient, as (O, 1, KH, KW).
Tensor diagonal_of(const Tensor& dense) {
  const int64_t o = dense.size(0), c = dense.size(1), m = o / c, t = dense.size(2) * dense.size(3);
  const std::vector<float> src = dense.to_vector();
  std::vector<float> out(static_cast<size_t>(o * t));
  for (int64_t oc = 0; oc < o; ++oc)
    for (int64_t i = 0; i < t; ++i) out[oc * t + i] = src[(oc * c + oc / m) * t + i];
  return Tensor::from_vector(out, {o, 1, dense.size(2), dense.size(3)});
}

void check_case(const DepthwiseCase& k, uint64_t seed) {
  INFO(k.name);
  ThreadsGuard threads(2);
  const int64_t c = k.x[1];
  Conv2dParams depthwise = k.p, dense = k.p;
  depthwise.groups = c;
  dense.groups = 1;
  const Tensor x = rand_tensor(k.x, seed, false), w = rand_tensor(k.w, seed + 1, false);
  const Tensor b = k.bias ? rand_tensor({k.w[0]}, seed + 2, false) : Tensor();
  const OpFn dw_op = [depthwise](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], depthwise); };
  const OpFn dense_op = [dense](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], dense); };
  const Tensor g = rand_tensor(conv2d(x, w, b, depthwise).sizes(), seed + 3, false);
  const OpRun got = run_op(dw_op, {x, w, b}, g, Device::cpu);
  const OpRun want = run_op(dense_op, {x, block_diagonal(w, c), b}, g, Device::cpu);
  const OpRun mag = run_abs(dw_op, {x, w, b}, g);
  const int64_t taps = k.w[2] * k.w[3], dense_terms = c * taps + 1;
  const int64_t n_terms = g.numel() / g.size(1);  // image positions summed into one weight tap
  check_within(got.y, want.y, sum_bound(mag.y, dense_terms), "output");
  check_within(got.grads[0], want.grads[0], sum_bound(mag.grads[0], dense_terms), "input gradient");
  check_within(got.grads[1], diagonal_of(want.grads[1]), sum_bound(mag.grads[1], n_terms), "weight gradient");
  if (k.bias) check_within(got.grads[2], want.grads[2], sum_bound(mag.grads[2], n_terms), "bias gradient");
}

}  // namespace

TEST_CASE("conv2d's direct depthwise kernel equals the dense convolution of its block-diagonal weight",
          "[ops][conv]") {
  const std::vector<DepthwiseCase> cases = {
      {"3x3 pad 1, rows of 37", {3, 5, 9, 37}, {5, 1, 3, 3}, {1, 1, 1, 1}, true},
      {"3x3 stride 2 pad 1 (MobileNetV2's downsampling)", {2, 6, 16, 20}, {6, 1, 3, 3}, {2, 2, 1, 1}, true},
      {"multiplier 2, 5x5 dilation 2 pad 4", {2, 3, 12, 11}, {6, 1, 5, 5}, {1, 1, 4, 4, 2, 2}, false},
      {"2x3 kernel, stride (2, 1), no padding", {1, 4, 7, 9}, {4, 1, 2, 3}, {2, 1, 0, 0}, true},
      {"stride 3 wider than the kernel", {2, 2, 10, 10}, {2, 1, 2, 2}, {3, 3, 1, 1}, false},
      // rows of 8, 16 and 32: the kernel's fixed-width rows (4 above)
      {"rows of 8", {2, 4, 8, 8}, {4, 1, 3, 3}, {1, 1, 1, 1}, true},
      {"rows of 16, multiplier 2", {2, 3, 6, 16}, {6, 1, 3, 3}, {1, 1, 1, 1}, false},
      {"rows of 32, stride 2", {1, 3, 9, 64}, {3, 1, 3, 3}, {2, 2, 1, 1}, true},
  };
  uint64_t seed = 300;
  for (const DepthwiseCase& k : cases) {
    check_case(k, seed);
    seed += 10;
  }
}
