// The per-index bodies that the CUDA twins of core's ops run (one thread per
// index), run here on the host over every index and compared with the CPU
// ops bit for bit (docs/conventions.md, convention 1): what a kernel computes is pinned
// down on a machine without a GPU. Two kinds of comparison:
// - against CPU code of its own: max pool's forward (AVX-512 and row paths)
//   and every pool backward (the gathers against the CPU scatters: same
//   additions, same order), broadcasting and sum_to, strided views (clone,
//   copy_), add_;
// - against the CPU op that calls the same body (average pools' forward,
//   losses, scale_channels' gradient sum): here the test checks how the
//   twin composes the bodies (rows, then the batch mean; per-element
//   gradients), and the CPU op's golden tests against PyTorch and its
//   gradient checks pin the bodies themselves.
// The device can differ from these host runs only in exp/log (Note [loss on
// the device]) and in what only a GPU run shows (launches, memory).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "core/ops/broadcast.h"
#include "core/ops/dropout_math.h"
#include "core/ops/loss_math.h"
#include "core/ops/pool_math.h"
#include "core/ops/scale_channels_math.h"
#include "core/strided_layout.h"
#include "tests/test_util.h"

namespace {

using qat::Generator;
using qat::Shape;
using qat::Tensor;
using qat::testing::check_same_bits;
namespace om = qat::op_math;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// A view of t with its dimensions permuted (sizes and strides; no copy).
Tensor permuted(const Tensor& t, const std::vector<size_t>& perm) {
  auto impl = std::make_shared<qat::TensorImpl>(*t.impl_ptr());
  for (size_t d = 0; d < perm.size(); ++d) {
    impl->sizes[d] = t.sizes()[perm[d]];
    impl->strides[d] = t.strides()[perm[d]];
  }
  impl->grad.reset();
  impl->grad_fn.reset();
  impl->requires_grad = false;
  return Tensor(std::move(impl));
}

// A random strided view of a fresh tensor: dims of 1..5, the first and last
// narrowed, the dims reversed when asked.
Tensor random_view(Generator& gen, int64_t dims, bool reverse) {
  Shape base(static_cast<size_t>(dims));
  for (auto& s : base) s = 1 + static_cast<int64_t>(gen.below(5));
  Tensor t = Tensor::randn(base, gen);
  t = t.narrow(0, t.size(0) > 1 ? 1 : 0, t.size(0) > 1 ? t.size(0) - 1 : 1);
  t = t.narrow(dims - 1, 0, std::max<int64_t>(1, t.size(dims - 1) - 1));
  if (reverse) {
    std::vector<size_t> perm(static_cast<size_t>(dims));
    std::iota(perm.rbegin(), perm.rend(), size_t{0});
    t = permuted(t, perm);
  }
  return t;
}

// The body's outputs over every index, as a tensor of `shape`.
template <class Body>
Tensor run_body(const Shape& shape, Body body) {
  Tensor out = Tensor::empty(shape);
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = body(i);
  return out;
}

// Values with many ties, both zeros, a few NaN and infinities.
Tensor awkward_pool_input(const Shape& shape, Generator& gen, bool with_nan) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int r = static_cast<int>(gen.below(12));
    const bool nan = r == 3 && with_nan && gen.bernoulli(0.2f);
    p[i] = r == 0 ? 0.f : r == 1 ? -0.f : r == 2 ? -kInf : nan ? kNaN : static_cast<float>(r % 4) - 1.5f;
  }
  return t;
}

}  // namespace

// ---------------------------------------------------------------- strided views

TEST_CASE("twin bodies: strided_offset walks any view in row-major order, as clone and copy_ do", "[math][cuda]") {
  Generator gen(3);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t dims = 1 + trial % 5;
    const Tensor v = random_view(gen, dims, trial % 2 == 1);
    INFO("view " << qat::shape_str(v.sizes()) << " strides " << qat::shape_str(v.strides()) << " offset "
                 << v.offset());
    const qat::StridedLayout l = qat::make_strided_layout(v.sizes(), v.strides(), "test");
    const float* base = v.data<float>();
    // The gather of clone()/contiguous() on the device ...
    check_same_bits(run_body(v.sizes(), [&](int64_t i) { return base[qat::strided_offset(i, l)]; }), v.clone(),
                    "gather");
    // ... and the scatter of copy_ into a strided device view.
    const Tensor src = Tensor::randn(v.sizes(), gen);
    Tensor body_dst = Tensor::zeros({static_cast<int64_t>(v.impl_ptr()->storage->nbytes / 4)});
    Tensor expect_dst = body_dst.clone();
    auto view_of = [&](const Tensor& storage) {
      auto impl = std::make_shared<qat::TensorImpl>(*v.impl_ptr());
      impl->storage = storage.impl_ptr()->storage;
      return Tensor(std::move(impl));
    };
    view_of(expect_dst).copy_(src);
    float* out = body_dst.data<float>() + v.offset();
    const float* ps = src.data<float>();
    for (int64_t i = 0; i < src.numel(); ++i) out[qat::strided_offset(i, l)] = ps[i];
    check_same_bits(body_dst, expect_dst, "scatter");
  }
  CHECK_THROWS_WITH(qat::make_strided_layout(Shape(9, 1), Shape(9, 1), "clone"),
                    Catch::Matchers::Contains("clone: a tensor of shape [1, 1, 1, 1, 1, 1, 1, 1, 1] has 9 dimensions"));
}

TEST_CASE("twin bodies: add_scaled is add_'s rule: exactly dst + src for alpha 1, one rounding otherwise",
          "[math][cuda]") {
  Generator gen(4);
  const Tensor d = Tensor::randn({1000}, gen), s = Tensor::randn({1000}, gen);
  for (const float alpha : {1.f, -0.37f, 3.f}) {
    Tensor cpu = d.clone();
    cpu.add_(s, alpha);
    const float* pd = d.data<float>();
    const float* ps = s.data<float>();
    check_same_bits(run_body({1000}, [&](int64_t i) { return om::add_scaled(pd[i], alpha, ps[i]); }), cpu,
                    "add_ alpha " + std::to_string(alpha));
    if (alpha == 1.f)
      check_same_bits(run_body({1000}, [&](int64_t i) { return pd[i] + ps[i]; }), cpu, "plain sum");
  }
}

// ---------------------------------------------------------------- pools

TEST_CASE("twin bodies: the pools' candidate output ranges are exactly the windows holding each input",
          "[math][cuda]") {
  for (int64_t k = 1; k <= 5; ++k)
    for (int64_t s = 1; s <= 4; ++s)
      for (int64_t pad = 0; 2 * pad <= k; ++pad)
        for (int64_t in = 1; in <= 12; ++in) {
          if (in + 2 * pad < k) continue;
          const int64_t out = (in + 2 * pad - k) / s + 1;
          for (int64_t t = 0; t < in; ++t) {
            std::set<int64_t> want;
            for (int64_t o = 0; o < out; ++o)
              if (o * s - pad <= t && t < o * s - pad + k) want.insert(o);
            const om::OutputRange r = om::sliding_windows_holding(t, k, s, pad, out);
            std::set<int64_t> got;
            for (int64_t o = r.first; o <= r.last; ++o) got.insert(o);
            INFO("k " << k << " s " << s << " pad " << pad << " in " << in << " t " << t);
            REQUIRE(got == want);
          }
        }
  for (int64_t in = 1; in <= 13; ++in)
    for (int64_t out = 1; out <= 13; ++out)
      for (int64_t t = 0; t < in; ++t) {
        std::set<int64_t> want;
        for (int64_t o = 0; o < out; ++o) {
          const qat::AdaptiveWindow w = qat::adaptive_window(o, in, out);
          if (w.begin <= t && t < w.end) want.insert(o);
        }
        const om::OutputRange r = om::adaptive_windows_holding(t, in, out);
        std::set<int64_t> got;
        for (int64_t o = r.first; o <= r.last; ++o) got.insert(o);
        INFO("in " << in << " out " << out << " t " << t);
        REQUIRE(got == want);
      }
}

TEST_CASE("twin bodies: max pool forward and gather backward equal max_pool2d: ties, NaN, -inf, edges",
          "[math][cuda]") {
  Generator gen(5);
  int cases = 0;
  for (int64_t k : {1, 2, 3, 4})
    for (int64_t s : {1, 2, 3, 5})  // 5: stride > kernel
      for (int64_t pad = 0; 2 * pad <= k; ++pad)
        for (int64_t H : {int64_t{1}, k, int64_t{7}})
          for (int64_t W : {int64_t{1}, k + 1, int64_t{9}}) {
            const qat::Pool2dParams p{k, k == 4 ? 3 : k, s, s == 3 ? 2 : s, pad, k == 4 ? 1 : pad};
            if (H + 2 * p.pad_h < p.kernel_h || W + 2 * p.pad_w < p.kernel_w || 2 * p.pad_w > p.kernel_w) continue;
            const int64_t N = 2, C = 3;
            const int64_t OH = (H + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
            const int64_t OW = (W + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
            const Tensor x = awkward_pool_input({N, C, H, W}, gen, cases % 2 == 0);
            Tensor xl = x.clone().set_requires_grad(true);
            Tensor y = qat::max_pool2d(xl, p);
            // Random gradients: an input that is the argmax of several
            // outputs sums them, and the order of those additions shows.
            const Tensor gy = Tensor::randn(y.sizes(), gen);
            y.backward(gy);
            INFO("k " << p.kernel_h << "x" << p.kernel_w << " s " << p.stride_h << "x" << p.stride_w << " pad "
                      << p.pad_h << "x" << p.pad_w << " H " << H << " W " << W);
            const om::MaxPoolGeometry geo = om::max_pool_geometry({H, W, OH, OW}, p);
            std::vector<int32_t> argmax(static_cast<size_t>(y.numel()));
            const float* px = x.data<float>();
            const Tensor body_y =
                run_body(y.sizes(), [&](int64_t i) { return om::max_pool_forward_at(i, px, geo, &argmax[i]); });
            check_same_bits(body_y, y.detach(), "forward");
            const Tensor body_dx = run_body(x.sizes(), [&](int64_t j) {
              return om::max_pool_backward_at(j, gy.data<float>(), argmax.data(), geo);
            });
            check_same_bits(body_dx, xl.grad(), "backward");
            ++cases;
          }
  CHECK(cases > 100);
}

TEST_CASE("twin bodies: avg_pool2d forward and gather backward equal the CPU op, with and without padded counts",
          "[math][cuda]") {
  Generator gen(6);
  int cases = 0;
  for (int64_t k : {1, 2, 3})
    for (int64_t s : {1, 2, 4})
      for (int64_t pad = 0; 2 * pad <= k; ++pad)
        for (int64_t H : {int64_t{1}, int64_t{5}, int64_t{8}})
          for (const bool include_pad : {true, false}) {
            const int64_t W = H + 2;
            const qat::Pool2dParams p{k, k, s, s, pad, pad};
            if (H + 2 * pad < k) continue;
            const int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
            const Tensor x = Tensor::randn({2, 2, H, W}, gen);
            Tensor xl = x.clone().set_requires_grad(true);
            Tensor y = qat::avg_pool2d(xl, p, include_pad);
            const Tensor gy = Tensor::randn(y.sizes(), gen);
            y.backward(gy);
            INFO("k " << k << " s " << s << " pad " << pad << " H " << H << " include_pad " << include_pad);
            const om::SlidingAvgWindows win = om::avg_pool_windows({H, W, OH, OW}, p, include_pad);
            const float* px = x.data<float>();
            const float* pg = gy.data<float>();
            check_same_bits(run_body(y.sizes(), [&](int64_t i) { return om::window_average_at(i, px, win); }),
                            y.detach(), "forward");
            check_same_bits(run_body(x.sizes(), [&](int64_t j) { return om::window_average_backward_at(j, pg, win); }),
                            xl.grad(), "backward");
            ++cases;
          }
  CHECK(cases > 50);
}

TEST_CASE("twin bodies: adaptive_avg_pool2d forward and gather backward equal the CPU op, down, uneven and up",
          "[math][cuda]") {
  Generator gen(7);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{1, 1, 1, 1}, {1, 1}}, {{1, 1, 1, 1}, {3, 4}},  // 1x1 planes, upsampled
      {{2, 3, 6, 6}, {3, 3}}, {{2, 3, 7, 5}, {3, 2}},  // even, uneven
      {{2, 2, 4, 3}, {7, 9}},                           // out > in both ways
      {{1, 4, 13, 13}, {6, 6}}, {{3, 2, 5, 9}, {1, 1}}, {{1, 1, 2, 11}, {5, 4}}};
  for (const auto& [in, out] : cases) {
    INFO("in " << qat::shape_str(in) << " out " << qat::shape_str(out));
    const Tensor x = Tensor::randn(in, gen);
    Tensor xl = x.clone().set_requires_grad(true);
    Tensor y = qat::adaptive_avg_pool2d(xl, out[0], out[1]);
    const Tensor gy = Tensor::randn(y.sizes(), gen);
    y.backward(gy);
    const om::AdaptiveAvgWindows win{{in[2], in[3], out[0], out[1]}};
    check_same_bits(run_body(y.sizes(), [&](int64_t i) { return om::window_average_at(i, x.data<float>(), win); }),
                    y.detach(), "forward");
    check_same_bits(
        run_body(x.sizes(), [&](int64_t j) { return om::window_average_backward_at(j, gy.data<float>(), win); }),
        xl.grad(), "backward");
  }
}

// ---------------------------------------------------------------- losses

TEST_CASE("twin bodies: cross_entropy's rows, batch mean and gradient equal the CPU op, and smoothing 0 is nll of "
          "log_softmax",
          "[math][cuda]") {
  Generator gen(8);
  for (const int64_t n : {1, 5, 33})
    for (const int64_t c : {1, 2, 10, 100})
      for (const float eps : {0.f, 0.1f}) {
        INFO("N " << n << " C " << c << " eps " << eps);
        const Tensor x = Tensor::randn({n, c}, gen, 0.f, 4.f);
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& v : t) v = static_cast<int32_t>(gen.below(static_cast<uint64_t>(c)));
        const Tensor target = Tensor::from_vector_i32(t, {n});
        Tensor xl = x.clone().set_requires_grad(true);
        Tensor loss = qat::cross_entropy(xl, target, eps);
        loss.backward(Tensor::scalar(0.75f));
        // The device's two kernels, on the host: rows, then the mean in order.
        const float on = 1.f - eps, off = eps / static_cast<float>(c);
        std::vector<float> logp(static_cast<size_t>(n * c));
        std::vector<double> rows(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          om::log_softmax_row(x.data<float>() + i * c, c, logp.data() + i * c);
          rows[i] = om::cross_entropy_row(logp.data() + i * c, c, t[i], on, off);
        }
        check_same_bits(Tensor::scalar(om::mean_in_order(rows.data(), n)), loss.detach(), "loss");
        check_same_bits(run_body({n, c},
                                 [&](int64_t i) {
                                   return om::cross_entropy_grad_at(i, logp.data(), t.data(), n, c, on, off, 0.75f);
                                 }),
                        xl.grad(), "gradient");
        if (eps == 0.f) {
          const Tensor lp = qat::log_softmax(x);
          check_same_bits(Tensor::scalar(om::nll_loss_value(lp.data<float>(), t.data(), n, c)), loss.detach(),
                          "smoothing 0: nll_loss of log_softmax");
        }
      }
}

TEST_CASE("twin bodies: log_softmax and nll_loss rows and gradients equal the CPU ops, and the log-softmax is right",
          "[math][cuda]") {
  Generator gen(9);
  const int64_t n = 7, c = 13;
  Tensor x = Tensor::randn({n, c}, gen, 0.f, 5.f);
  x.data<float>()[3] = 80.f;  // a large logit: the max subtracted keeps exp finite
  Tensor xl = x.clone().set_requires_grad(true);
  Tensor y = qat::log_softmax(xl);
  const Tensor gy = Tensor::randn({n, c}, gen);
  y.backward(gy);
  std::vector<float> out(static_cast<size_t>(n * c)), dx(out.size());
  for (int64_t i = 0; i < n; ++i) {
    om::log_softmax_row(x.data<float>() + i * c, c, out.data() + i * c);
    om::log_softmax_backward_row(out.data() + i * c, gy.data<float>() + i * c, c, dx.data() + i * c);
    long double s = 0;  // an independent reference: the log-softmax in long double
    for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<long double>(x.data<float>()[i * c + j]));
    for (int64_t j = 0; j < c; ++j) {
      const double ref = static_cast<double>(x.data<float>()[i * c + j] - std::log(s));
      CHECK(std::abs(out[i * c + j] - ref) <= 4e-6 * (1 + std::abs(ref)));
    }
  }
  check_same_bits(Tensor::from_vector(out, {n, c}), y.detach(), "log_softmax forward");
  check_same_bits(Tensor::from_vector(dx, {n, c}), xl.grad(), "log_softmax backward");

  std::vector<int32_t> t = {0, 12, 5, 5, 1, 7, 3};
  const Tensor target = Tensor::from_vector_i32(t, {n});
  Tensor lp = y.detach().clone().set_requires_grad(true);
  Tensor loss = qat::nll_loss(lp, target);
  loss.backward(Tensor::scalar(-2.f));
  check_same_bits(Tensor::scalar(om::nll_loss_value(out.data(), t.data(), n, c)), loss.detach(), "nll forward");
  check_same_bits(run_body({n, c}, [&](int64_t i) { return om::nll_loss_grad_at(i, t.data(), n, c, -2.f); }),
                  lp.grad(), "nll backward");
}

// ---------------------------------------------------------------- dropout

TEST_CASE("twin bodies: the dropout mask is 0 or 1/(1-p), drops a share p, and is a function of the key",
          "[math][cuda]") {
  const int64_t n = 1 << 20;
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    const float scale = 1.f / (1.f - p);
    const uint64_t key = 0x1234567ull + static_cast<uint64_t>(p * 100);
    int64_t dropped = 0, both = 0;
    bool prev = false;
    for (int64_t i = 0; i < n; ++i) {
      const float m = om::dropout_mask_at(key, i, p, scale);
      REQUIRE((m == 0.f || m == scale));
      const bool d = m == 0.f;
      dropped += d;
      both += d && prev;  // neighbours dropped together: p^2 if independent
      prev = d;
    }
    const double rate = static_cast<double>(dropped) / n, sd = std::sqrt(p * (1 - p) / n);
    INFO("p " << p << " rate " << rate << " pairs " << static_cast<double>(both) / (n - 1));
    CHECK(std::abs(rate - p) < 5 * sd);
    CHECK(std::abs(static_cast<double>(both) / (n - 1) - p * p) < 0.005);
  }
  // Same key, same mask; another key, another mask; p = 0 keeps all, p = 1 drops all.
  int64_t same = 0, differ = 0;
  for (int64_t i = 0; i < 10000; ++i) {
    same += om::dropout_mask_at(42, i, 0.5f, 2.f) == om::dropout_mask_at(42, i, 0.5f, 2.f);
    differ += om::dropout_mask_at(42, i, 0.5f, 2.f) != om::dropout_mask_at(43, i, 0.5f, 2.f);
    REQUIRE(om::dropout_mask_at(42, i, 0.f, 1.f) == 1.f);
    REQUIRE(om::dropout_mask_at(42, i, 1.f, 0.f) == 0.f);
  }
  CHECK(same == 10000);
  CHECK(differ > 4500);
  CHECK(differ < 5500);
  // The uniform is on the 2^-24 grid in [0, 1): SplitMix64's known first output for state 0.
  CHECK(om::splitmix64_at(0, 0) == 0xE220A8397B1DCDAFull);
  for (int64_t i = 0; i < 1000; ++i) {
    const float u = om::dropout_uniform(7, i);
    REQUIRE((u >= 0.f && u < 1.f && u * 16777216.f == std::floor(u * 16777216.f)));
  }
}

// The CPU op follows the same rule (Note [dropout mask]): one draw of the
// generator per call, each element's mask from (key, index), the backward the
// same mask recomputed; so the CPU and the device drop the same elements.
TEST_CASE("dropout on the CPU follows the mask rule from one draw of the generator", "[math][cuda]") {
  Generator data(27);
  const int64_t n = 1 << 17;
  const Tensor x = Tensor::randn({n / 64, 64}, data);
  const Tensor g = Tensor::randn({n / 64, 64}, data);
  qat::testing::ThreadsGuard threads(2);  // the mask must not depend on which thread draws it
  for (const float p : {0.2f, 0.5f, 1.f}) {
    INFO("p " << p);
    Generator gen(99), replay(99);
    const uint64_t key = replay.next_u64();
    Tensor xl = x.clone().set_requires_grad(true);
    Tensor y = qat::dropout(xl, p, true, gen);
    y.backward(g);
    CHECK(gen.state() == replay.state());  // one draw per call
    const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
    std::vector<float> want_y(static_cast<size_t>(n)), want_dx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float m = om::dropout_mask_at(key, i, p, scale);
      want_y[i] = x.data<float>()[i] * m;
      want_dx[i] = g.data<float>()[i] * m;
    }
    REQUIRE(y.to_vector() == want_y);
    REQUIRE(xl.grad().to_vector() == want_dx);
  }
}

// ---------------------------------------------------------------- scale_channels

TEST_CASE("twin bodies: scale_channels' products and per-channel gradient sums equal the CPU op", "[math][cuda]") {
  Generator gen(10);
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{16, 3, 3, 3}, 0}, {{4, 6, 5, 5}, 1}, {{2, 3, 4, 37}, 3}, {{7}, 0}, {{3, 40}, 1}, {{2, 5, 1, 1}, 1}};
  for (const auto& [shape, axis] : cases) {
    INFO("shape " << qat::shape_str(shape) << " axis " << axis);
    const Tensor x = Tensor::randn(shape, gen);
    const Tensor s = Tensor::randn({shape[static_cast<size_t>(axis)]}, gen);
    Tensor xl = x.clone().set_requires_grad(true), sl = s.clone().set_requires_grad(true);
    Tensor y = qat::scale_channels(xl, sl, axis);
    const Tensor gy = Tensor::randn(shape, gen);
    y.backward(gy);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
    const int64_t C = s.numel();
    const float* ps = s.data<float>();
    check_same_bits(
        run_body(shape, [&](int64_t i) { return x.data<float>()[i] * ps[om::channel_of(i, C, inner)]; }), y.detach(),
        "forward");
    check_same_bits(
        run_body(shape, [&](int64_t i) { return gy.data<float>()[i] * ps[om::channel_of(i, C, inner)]; }), xl.grad(),
        "input gradient");
    check_same_bits(run_body({C},
                             [&](int64_t c) {
                               return om::scale_channel_grad(c, gy.data<float>(), x.data<float>(), outer, C, inner);
                             }),
                    sl.grad(), "scale gradient");
  }
}

// ---------------------------------------------------------------- elementwise

TEST_CASE("twin bodies: broadcasting add/sub/mul/div and sum_to equal the CPU ops, strided operands included",
          "[math][cuda]") {
  Generator gen(11);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}},       {{4, 1, 5}, {3, 1}}, {{2, 3, 4, 5}, {5}},   {{1}, {3, 7}},
      {{3, 1, 1, 2}, {1, 4, 5, 1}}, {{}, {2, 2}},   {{6, 1}, {1, 6}},     {{2, 0, 3}, {3}}};
  const std::vector<std::pair<om::BinaryOp, Tensor (*)(const Tensor&, const Tensor&)>> ops = {
      {om::BinaryOp::add, [](const Tensor& a, const Tensor& b) { return qat::add(a, b); }},
      {om::BinaryOp::sub, [](const Tensor& a, const Tensor& b) { return qat::sub(a, b); }},
      {om::BinaryOp::mul, [](const Tensor& a, const Tensor& b) { return qat::mul(a, b); }},
      {om::BinaryOp::div, [](const Tensor& a, const Tensor& b) { return qat::div(a, b); }}};
  for (const auto& [sa, sb] : shapes)
    for (const bool strided : {false, true}) {
      // A strided operand: a column-narrowed view of a wider tensor.
      auto operand = [&](const Shape& s) {
        if (!strided || s.empty()) return Tensor::randn(s, gen);
        Shape wide = s;
        wide.back() += 2;
        return Tensor::randn(wide, gen).narrow(static_cast<int64_t>(s.size()) - 1, 1, s.back());
      };
      const Tensor a = operand(sa), b = operand(sb);
      const Shape out = qat::broadcast_shapes(sa, sb, "test");
      const qat::StridedLayout la = om::broadcast_layout(a, out, "test"), lb = om::broadcast_layout(b, out, "test");
      for (const auto& op_fn : ops) {
        const auto op = op_fn.first;  // not a structured binding: Clang 14 cannot capture one
        const auto& fn = op_fn.second;
        INFO("a " << qat::shape_str(sa) << " b " << qat::shape_str(sb) << " strided " << strided << " op "
                  << static_cast<int>(op));
        check_same_bits(run_body(out,
                                 [&](int64_t i) {
                                   return om::broadcast_binary_at(i, op, a.data<float>(), la, b.data<float>(), lb);
                                 }),
                        fn(a, b), "forward");
      }
      // sum_to: the output gradient (out) summed back to each operand's shape.
      const Tensor g = operand(out);
      for (const Shape& target : {sa, sb}) {
        INFO("sum_to " << qat::shape_str(out) << " -> " << qat::shape_str(target) << " strided " << strided);
        const om::SumToLayouts l = om::sum_to_layouts(g, target);
        const float* pg = g.data<float>();
        check_same_bits(run_body(target, [&](int64_t k) { return om::sum_to_at(k, pg, l.kept, l.summed, l.count); }),
                        qat::sum_to(g, target), "sum_to");
      }
    }
  CHECK_THROWS_WITH(om::sum_to_layouts(Tensor::zeros({2, 3}), {4}), Catch::Matchers::Contains("sum_to: cannot reduce"));
}
