// The CUDA twins of core's ops (pools, dropout, losses, scale_channels,
// elementwise, sum/mean) and Tensor's device paths (in-place ops, strided
// copies): the refusals of mixed devices and of device tensors without a GPU
// are checked on every machine; with a GPU, each twin forward and backward
// against the CPU op on random shapes, bit for bit where the device runs the
// CPU's arithmetic (test_twin_bodies.cpp pins those bodies on the host), and
// within a stated tolerance where it cannot (CUDA's exp/log, CUB's order).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cuda_runtime.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/ops/dropout_math.h"
#include "tests/cuda_test_util.h"
#include "tests/test_util.h"

namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using qat::Device;
using qat::DType;
using qat::Generator;
using qat::Shape;
using qat::Tensor;
using qat::testing::check_same_bits;
using qat::testing::cuda_device_or_skip;
using qat::testing::CudaOrLabelled;
namespace cuda = qat::cuda;

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// What an op on a cuda tensor says without a GPU: the no-GPU error where CUDA
// is built (a device allocation or copy refuses), else the CPU code's refusal.
std::string no_gpu_refusal() {
  return cuda::built() ? "no usable CUDA device" : "is on cuda";
}

using UnaryOp = std::function<Tensor(const Tensor&)>;

// f on the CPU and on the device from the same values, backward from the
// same gradient: outputs and input gradients bit for bit.
void check_twin_exact(const UnaryOp& f, const Tensor& x, const Tensor& g, const std::string& what) {
  Tensor xc = x.clone().set_requires_grad(true);
  Tensor yc = f(xc);
  yc.backward(g);
  Tensor xd = x.to(Device::cuda).set_requires_grad(true);
  Tensor yd = f(xd);
  REQUIRE(yd.device() == Device::cuda);
  yd.backward(g.to(Device::cuda));
  REQUIRE(xd.grad().defined());
  CHECK(xd.grad().device() == Device::cuda);
  check_same_bits(yd, yc.detach(), what + " forward");
  check_same_bits(xd.grad(), xc.grad(), what + " backward");
}

Tensor with_ties_and_nan(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::randn(shape, gen);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); i += 5) p[i] = static_cast<float>(i % 3);  // ties
  for (int64_t i = 3; i < t.numel(); i += 41) p[i] = kNaN;
  for (int64_t i = 7; i < t.numel(); i += 13) p[i] = (i & 1) ? 0.f : -0.f;
  return t;
}

}  // namespace

// ---------------------------------------------------------------- every machine

TEST_CASE("cuda twins: mixed devices are refused naming the op and both tensors", "[cuda]") {
  CudaOrLabelled d(Tensor::ones({2, 3}));
  CudaOrLabelled dt(Tensor::from_vector_i32({0, 1}, {2}));
  CudaOrLabelled ds(Tensor::ones({3}));
  const Tensor cpu = Tensor::ones({2, 3});
  const Tensor target = Tensor::from_vector_i32({0, 2}, {2});
  CHECK_THROWS_WITH(qat::add(cpu, d.t),
                    Equals("add: expected all tensors on one device, but a is on cpu and b is on cuda"));
  CHECK_THROWS_WITH(qat::mul(d.t, cpu),
                    Equals("mul: expected all tensors on one device, but a is on cuda and b is on cpu"));
  CHECK_THROWS_WITH(qat::div(cpu, d.t), Contains("div: expected all tensors on one device"));
  CHECK_THROWS_WITH(qat::scale_channels(d.t, Tensor::ones({3}), 1),
                    Equals("scale_channels: expected all tensors on one device, but input is on cuda and scale is "
                           "on cpu"));
  CHECK_THROWS_WITH(qat::scale_channels(cpu, ds.t, 1), Contains("scale_channels: expected all tensors on one device"));
  CHECK_THROWS_WITH(qat::cross_entropy(d.t, target),
                    Equals("cross_entropy: expected all tensors on one device, but input is on cuda and target is "
                           "on cpu"));
  CHECK_THROWS_WITH(qat::cross_entropy(cpu, dt.t), Contains("cross_entropy: expected all tensors on one device"));
  CHECK_THROWS_WITH(qat::nll_loss(d.t, target), Contains("nll_loss: expected all tensors on one device"));
  Tensor dst = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(dst.add_(d.t),
                    Equals("add_: expected all tensors on one device, but destination is on cpu and other is on cuda"));
  CHECK_THROWS_WITH(d.t.add_(cpu), Contains("add_: expected all tensors on one device, but destination is on cuda"));
}

TEST_CASE("cuda twins: without a GPU the ops and in-place changes of a cuda tensor refuse, naming why", "[cuda]") {
  if (cuda::available()) {
    WARN("skipped: a GPU is present, so the no-GPU refusals cannot occur here");
    return;
  }
  CudaOrLabelled d(Tensor::ones({1, 2, 4, 4}));
  CudaOrLabelled flat(Tensor::ones({2, 3}));
  CudaOrLabelled t(Tensor::from_vector_i32({0, 1}, {2}));
  Generator gen(1);
  const std::string why = no_gpu_refusal();
  CHECK_THROWS_WITH(qat::max_pool2d(d.t, {2, 2, 2, 2}), Contains(why));
  CHECK_THROWS_WITH(qat::avg_pool2d(d.t, {2, 2, 2, 2}), Contains(why));
  CHECK_THROWS_WITH(qat::adaptive_avg_pool2d(d.t, 1, 1), Contains(why));
  CHECK_THROWS_WITH(qat::dropout(d.t, 0.5f, true, gen), Contains(why));
  CHECK(qat::dropout(d.t, 0.5f, false, gen).same_storage(d.t));  // eval: the input itself, on any device
  // (its targets' range check copies the device target to the host first)
  CHECK_THROWS_WITH(qat::cross_entropy(flat.t, t.t),
                    Contains(cuda::built() ? "no usable CUDA device" : "without CUDA"));
  CHECK_THROWS_WITH(qat::log_softmax(flat.t), Contains(why));
  CHECK_THROWS_WITH(qat::add(flat.t, flat.t), Contains(why));
  CHECK_THROWS_WITH(qat::sum(flat.t), Contains(why));
  const std::string inplace = cuda::built() ? "no usable CUDA device" : "runs on the CPU only";
  CHECK_THROWS_WITH(flat.t.fill_(1.f), Contains("fill_: ") && Contains(inplace));
  CHECK_THROWS_WITH(flat.t.mul_(2.f), Contains("mul_: ") && Contains(inplace));
  CHECK_THROWS_WITH(flat.t.add_(flat.t), Contains("add_: ") && Contains(inplace));
}

// ---------------------------------------------------------------- with a GPU: Tensor

TEST_CASE("cuda twins: fill_, mul_ and add_ on device tensors and strided views equal the CPU", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(21);
  const Tensor x = Tensor::randn({6, 7, 5}, gen);
  const Tensor other = Tensor::randn({6, 7, 5}, gen);
  for (const bool strided : {false, true}) {
    INFO("strided " << strided);
    auto view = [&](const Tensor& t) { return strided ? t.narrow(1, 2, 4).narrow(2, 1, 3) : t; };
    Tensor c = x.clone(), d = x.to(Device::cuda);
    view(c).fill_(-2.5f);
    view(d).fill_(-2.5f);
    check_same_bits(d, c, "fill_");
    c = x.clone(), d = x.to(Device::cuda);
    view(c).mul_(0.3f);
    view(d).mul_(0.3f);
    check_same_bits(d, c, "mul_");
  }
  for (const float alpha : {1.f, -0.1f}) {
    Tensor c = x.clone(), d = x.to(Device::cuda);
    const uint64_t v = d.version();
    c.add_(other, alpha);
    d.add_(other.to(Device::cuda), alpha);
    CHECK(d.version() == v + 1);
    check_same_bits(d, c, "add_");
    // A strided source is made contiguous on the device first.
    Tensor c2 = x.narrow(1, 0, 3).clone(), d2 = x.narrow(1, 0, 3).to(Device::cuda);
    c2.add_(other.narrow(1, 4, 3), alpha);
    d2.add_(other.to(Device::cuda).narrow(1, 4, 3), alpha);
    check_same_bits(d2, c2, "add_ from a strided view");
  }
  Tensor self = x.to(Device::cuda);
  self.add_(self);  // one buffer both ways
  check_same_bits(self, qat::add(x, x), "t.add_(t)");
}

TEST_CASE("cuda twins: contiguous, clone and copy_ of strided device views, every dtype", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(22);
  const Tensor f = Tensor::randn({5, 6, 7}, gen);
  for (const DType dt : {DType::f32, DType::i32, DType::i8, DType::u8}) {
    INFO(qat::dtype_name(dt));
    const Tensor host = dt == DType::f32 ? f : qat::mul(f, 20.f).to(dt);
    const Tensor dev = host.to(Device::cuda);
    const Tensor hv = host.narrow(2, 1, 4).narrow(0, 2, 3), dv = dev.narrow(2, 1, 4).narrow(0, 2, 3);
    REQUIRE_FALSE(dv.is_contiguous());
    const Tensor dc = dv.contiguous();
    CHECK(dc.device() == Device::cuda);
    CHECK(dc.is_contiguous());
    CHECK(qat::testing::same_bits(dc.to(Device::cpu), hv.contiguous()));
    CHECK(qat::testing::same_bits(dv.clone().to(Device::cpu), hv.contiguous()));
  }
  // copy_ into a strided device view: from the host, from the device, and
  // from a view of its own storage.
  Tensor hd = f.clone();
  Tensor dd = f.to(Device::cuda);
  const Tensor src = Tensor::randn({5, 3, 7}, gen);
  hd.narrow(1, 2, 3).copy_(src);
  dd.narrow(1, 2, 3).copy_(src);
  check_same_bits(dd, hd, "copy_ from the host");
  hd.narrow(1, 0, 3).copy_(src.narrow(0, 0, 5));
  dd.narrow(1, 0, 3).copy_(src.to(Device::cuda));
  check_same_bits(dd, hd, "copy_ from the device");
  hd.narrow(1, 3, 3).copy_(hd.narrow(1, 1, 3).clone());
  dd.narrow(1, 3, 3).copy_(dd.narrow(1, 1, 3));  // overlapping views of one storage
  check_same_bits(dd, hd, "copy_ between overlapping views");
}

TEST_CASE("cuda twins: reshape, flatten and slice of device tensors and views, with gradients", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(23);
  const Tensor x = Tensor::randn({4, 3, 5, 2}, gen);
  check_twin_exact([](const Tensor& t) { return qat::flatten(t); }, x, Tensor::randn({4, 30}, gen), "flatten");
  check_twin_exact([](const Tensor& t) { return qat::reshape(qat::slice(t, 2, 1, 3), {-1, 6}); }, x,
                   Tensor::randn({12, 6}, gen), "reshape of a slice");
  // A strided device view (not a leaf): reshape makes it contiguous on the device.
  const Tensor d = x.to(Device::cuda).narrow(2, 1, 3);
  check_same_bits(qat::reshape(d, {12, 6}), x.narrow(2, 1, 3).contiguous().view({12, 6}), "reshape of a view");
}

TEST_CASE("cuda twins: autograd sums the gradients of a leaf used twice on the device (add_)", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(24);
  const Tensor x = Tensor::randn({3, 4}, gen), w = Tensor::randn({4}, gen);
  auto step = [](Tensor& leaf, const Tensor& weight) {
    // leaf twice: through mul (broadcast weight) and directly; a scalar root
    // with the implicit gradient (ones, on the root's device).
    Tensor y = qat::add(qat::mul(leaf, weight), leaf);
    qat::sum(qat::mul(y, 0.5f)).backward();
  };
  Tensor xc = x.clone().set_requires_grad(true), wc = w.clone().set_requires_grad(true);
  Tensor xd = x.to(Device::cuda).set_requires_grad(true), wd = w.to(Device::cuda).set_requires_grad(true);
  step(xc, wc);
  step(xd, wd);
  REQUIRE(xd.grad().device() == Device::cuda);
  check_same_bits(xd.grad(), xc.grad(), "leaf used twice");
  check_same_bits(wd.grad(), wc.grad(), "broadcast weight (sum_to)");
  step(xc, wc);  // a second backward accumulates into .grad (AccumulateGrad's add_)
  step(xd, wd);
  check_same_bits(xd.grad(), xc.grad(), "accumulated over two backwards");
  check_same_bits(wd.grad(), wc.grad(), "weight accumulated");
}

// ---------------------------------------------------------------- with a GPU: ops

TEST_CASE("cuda twins: max_pool2d, avg_pool2d and adaptive_avg_pool2d equal the CPU ops bit for bit", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(25);
  const std::vector<std::pair<Shape, qat::Pool2dParams>> pools = {
      {{2, 3, 13, 13}, {3, 3, 2, 2, 0, 0}},  // AlexNet's
      {{1, 4, 8, 9}, {2, 3, 2, 1, 1, 1}},    {{3, 2, 7, 7}, {2, 2, 3, 3, 1, 0}},  // stride > kernel
      {{2, 2, 1, 1}, {1, 1, 1, 1, 0, 0}},    {{1, 1, 64, 64}, {3, 3, 1, 1, 1, 1}}};
  for (const auto& pool : pools) {
    // Named copies, not a structured binding: Clang 14 cannot capture those in a lambda.
    const Shape shape = pool.first;
    const auto p = pool.second;
    INFO("input " << qat::shape_str(shape) << " kernel " << p.kernel_h << "x" << p.kernel_w << " stride "
                  << p.stride_h << "x" << p.stride_w << " pad " << p.pad_h << "x" << p.pad_w);
    const Tensor x = with_ties_and_nan(shape, gen);
    const int64_t OH = (shape[2] + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
    const int64_t OW = (shape[3] + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
    const Tensor g = Tensor::randn({shape[0], shape[1], OH, OW}, gen);
    check_twin_exact([&](const Tensor& t) { return qat::max_pool2d(t, p); }, x, g, "max_pool2d");
    const Tensor finite = Tensor::randn(shape, gen);
    for (const bool include_pad : {true, false})
      check_twin_exact([&](const Tensor& t) { return qat::avg_pool2d(t, p, include_pad); }, finite, g,
                       include_pad ? "avg_pool2d" : "avg_pool2d without padded counts");
  }
  for (const auto& sizes : std::vector<std::pair<Shape, Shape>>{
           {{2, 8, 6, 6}, {1, 1}}, {{2, 3, 13, 13}, {6, 6}}, {{1, 2, 5, 7}, {3, 2}}, {{2, 2, 3, 2}, {7, 5}}}) {
    const Shape in = sizes.first, out = sizes.second;
    INFO("adaptive " << qat::shape_str(in) << " -> " << qat::shape_str(out));
    const Tensor x = Tensor::randn(in, gen);
    check_twin_exact([&](const Tensor& t) { return qat::adaptive_avg_pool2d(t, out[0], out[1]); }, x,
                     Tensor::randn({in[0], in[1], out[0], out[1]}, gen), "adaptive_avg_pool2d");
  }
  // A gradient on the wrong device is refused by name.
  Tensor xd = Tensor::ones({1, 1, 4, 4}).to(Device::cuda).set_requires_grad(true);
  CHECK_THROWS_WITH(qat::avg_pool2d(xd, {2, 2, 2, 2}).backward(Tensor::ones({1, 1, 2, 2})),
                    Contains("avg_pool2d backward: expected all tensors on one device, but input is on cuda and "
                             "gradient is on cpu"));
}

// Note [loss on the device]: CUDA's exp and log are within 1 ulp (double) and
// 2 ulp (expf) of the exact value, glibc's differently so; log-probabilities
// and the loss may differ in their last float bits, and the softmax
// gradients by a few ulp of exp(logp) times g/N.
TEST_CASE("cuda twins: cross_entropy, log_softmax and nll_loss on the device within a few ulp of the CPU", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(26);
  for (const int64_t n : {1, 32, 257})
    for (const int64_t c : {10, 1000})
      for (const float eps : {0.f, 0.1f}) {
        INFO("N " << n << " C " << c << " label smoothing " << eps);
        const Tensor x = Tensor::randn({n, c}, gen, 0.f, 3.f);
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& v : t) v = static_cast<int32_t>(gen.below(static_cast<uint64_t>(c)));
        const Tensor target = Tensor::from_vector_i32(t, {n});
        Tensor xc = x.clone().set_requires_grad(true);
        Tensor lc = qat::cross_entropy(xc, target, eps);
        lc.backward();
        Tensor xd = x.to(Device::cuda).set_requires_grad(true);
        Tensor ld = qat::cross_entropy(xd, target.to(Device::cuda), eps);
        REQUIRE(ld.device() == Device::cuda);
        ld.backward();  // the implicit gradient, made on the loss's device
        qat::testing::require_close(ld.to(Device::cpu), lc.detach(), 0, 1e-6, "cross_entropy loss");
        // p = exp(logp) within ~1e-6 relative on either side, times 1/N.
        qat::testing::require_close(xd.grad().to(Device::cpu), xc.grad(), 2e-6 / static_cast<double>(n), 1e-5,
                                    "cross_entropy gradient");
      }
  const Tensor x = Tensor::randn({9, 17}, gen, 0.f, 4.f);
  const Tensor g = Tensor::randn({9, 17}, gen);
  Tensor xc = x.clone().set_requires_grad(true), xd = x.to(Device::cuda).set_requires_grad(true);
  Tensor yc = qat::log_softmax(xc), yd = qat::log_softmax(xd);
  yc.backward(g);
  yd.backward(g.to(Device::cuda));
  qat::testing::require_close(yd.to(Device::cpu), yc.detach(), 2e-6, 1e-6, "log_softmax");
  qat::testing::require_close(xd.grad().to(Device::cpu), xc.grad(), 1e-5, 1e-5, "log_softmax gradient");
  const Tensor target = Tensor::from_vector_i32({0, 16, 3, 3, 5, 8, 1, 2, 9}, {9});
  Tensor lc = yc.detach().clone().set_requires_grad(true);
  Tensor ld = yc.detach().to(Device::cuda).set_requires_grad(true);
  Tensor nc = qat::nll_loss(lc, target), nd = qat::nll_loss(ld, target.to(Device::cuda));
  nc.backward(Tensor::scalar(1.5f));
  nd.backward(Tensor::scalar(1.5f).to(Device::cuda));
  check_same_bits(nd, nc.detach(), "nll_loss (no exp or log: the same sum in the same order)");
  check_same_bits(ld.grad(), lc.grad(), "nll_loss gradient");
  // Targets out of range are refused on the device too (checked on the host).
  CHECK_THROWS_WITH(qat::cross_entropy(xd, Tensor::from_vector_i32({0, 1, 2, 3, 4, 5, 6, 7, 17}, {9}).to(Device::cuda)),
                    Contains("cross_entropy: target 17 at index 8 out of range [0, 17)"));
}

TEST_CASE("cuda twins: dropout on the device follows the mask rule from one draw of the generator, as the CPU", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator data(27);
  const int64_t n = 1 << 18;
  const Tensor x = Tensor::randn({n / 64, 64}, data);
  const Tensor g = Tensor::randn({n / 64, 64}, data);
  for (const float p : {0.2f, 0.5f, 1.f}) {
    INFO("p " << p);
    Generator gen(99), replay(99);
    const uint64_t key = replay.next_u64();  // Note [dropout mask]
    Tensor xd = x.to(Device::cuda).set_requires_grad(true);
    Tensor yd = qat::dropout(xd, p, true, gen);
    yd.backward(g.to(Device::cuda));
    CHECK(gen.state() == replay.state());  // one draw per call
    const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
    Tensor want_y = Tensor::empty(x.sizes()), want_dx = Tensor::empty(x.sizes());
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float m = qat::op_math::dropout_mask_at(key, i, p, scale);
      dropped += m == 0.f;
      want_y.data<float>()[i] = x.data<float>()[i] * m;
      want_dx.data<float>()[i] = g.data<float>()[i] * m;
    }
    check_same_bits(yd, want_y, "forward");
    check_same_bits(xd.grad(), want_dx, "backward (the mask recomputed)");
    CHECK(std::abs(static_cast<double>(dropped) / n - p) < 0.01);
    // The same seed again: the same output; and the CPU's for that seed.
    Generator again(99), on_cpu(99);
    check_same_bits(qat::dropout(x.to(Device::cuda), p, true, again), want_y, "same seed");
    check_same_bits(qat::dropout(x, p, true, on_cpu), want_y, "the CPU op, same seed");
  }
}

TEST_CASE("cuda twins: scale_channels forward and both gradients equal the CPU op bit for bit", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(28);
  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
           {{64, 32, 3, 3}, 0}, {{8, 16, 7, 7}, 1}, {{5, 300}, 1}, {{3, 4, 5, 6}, 3}}) {
    INFO("shape " << qat::shape_str(shape) << " axis " << axis);
    const Tensor x = Tensor::randn(shape, gen), g = Tensor::randn(shape, gen);
    const Tensor s = Tensor::randn({shape[static_cast<size_t>(axis)]}, gen);
    Tensor xc = x.clone().set_requires_grad(true), sc = s.clone().set_requires_grad(true);
    Tensor xd = x.to(Device::cuda).set_requires_grad(true), sd = s.to(Device::cuda).set_requires_grad(true);
    Tensor yc = qat::scale_channels(xc, sc, axis), yd = qat::scale_channels(xd, sd, axis);
    yc.backward(g);
    yd.backward(g.to(Device::cuda));
    check_same_bits(yd, yc.detach(), "forward");
    check_same_bits(xd.grad(), xc.grad(), "input gradient");
    check_same_bits(sd.grad(), sc.grad(), "scale gradient");
  }
}

TEST_CASE("cuda twins: broadcasting add/sub/mul/div, scalar ops and sum_to equal the CPU ops bit for bit", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(29);
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Binary>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return qat::add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return qat::sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return qat::mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return qat::div(a, b); }}};
  for (const auto& [sa, sb] : std::vector<std::pair<Shape, Shape>>{
           {{32, 64}, {32, 64}}, {{8, 1, 5}, {3, 1}}, {{2, 16, 4, 4}, {16, 1, 1}}, {{}, {4, 4}}, {{1000}, {1}}})
    for (const auto& [name, op] : ops) {
      INFO(name << " " << qat::shape_str(sa) << " with " << qat::shape_str(sb));
      const Tensor a = Tensor::randn(sa, gen), b = Tensor::uniform(sb, gen, 0.5f, 2.f);  // no b near 0 (div)
      const Shape out = qat::broadcast_shapes(sa, sb, name);
      const Tensor g = Tensor::randn(out, gen);
      Tensor ac = a.clone().set_requires_grad(true), bc = b.clone().set_requires_grad(true);
      Tensor ad = a.to(Device::cuda).set_requires_grad(true), bd = b.to(Device::cuda).set_requires_grad(true);
      Tensor yc = op(ac, bc), yd = op(ad, bd);
      yc.backward(g);
      yd.backward(g.to(Device::cuda));
      check_same_bits(yd, yc.detach(), "forward");
      check_same_bits(ad.grad(), ac.grad(), "a's gradient");
      check_same_bits(bd.grad(), bc.grad(), "b's gradient");
    }
  // Strided operands are read in place.
  const Tensor wide = Tensor::randn({6, 10}, gen);
  const Tensor dw = wide.to(Device::cuda);
  check_same_bits(qat::mul(dw.narrow(1, 1, 4), dw.narrow(1, 6, 4)),
                  qat::mul(wide.narrow(1, 1, 4), wide.narrow(1, 6, 4)), "strided operands");
  const Tensor x = Tensor::randn({7, 9}, gen);
  check_twin_exact([](const Tensor& t) { return qat::add(t, 1.25f); }, x, Tensor::randn({7, 9}, gen), "add scalar");
  check_twin_exact([](const Tensor& t) { return qat::mul(t, -3.f); }, x, Tensor::randn({7, 9}, gen), "mul scalar");
  check_twin_exact([](const Tensor& t) { return qat::neg(t); }, x, Tensor::randn({7, 9}, gen), "neg");
  const Tensor big = Tensor::randn({4, 6, 5}, gen);
  for (const Shape& to : {Shape{6, 1}, Shape{4, 1, 5}, Shape{1}, Shape{}})
    check_same_bits(qat::sum_to(big.to(Device::cuda), to), qat::sum_to(big, to), "sum_to " + qat::shape_str(to));
  check_twin_exact([](const Tensor& t) { return qat::sum(t, 1, true); }, big, Tensor::randn({4, 1, 5}, gen),
                   "sum over a dim");
}

// CUB adds in a tree, the CPU in OpenMP's chunks, both in double: the float
// sums differ at most where the double sums round to neighbouring floats
// (1 ulp, 2^-23 relative at most; the mean's product by 1/n may add one more).
TEST_CASE("cuda twins: sum and mean over all elements (CUB) within one float rounding of the CPU", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(30);
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3} << 20}) {
    INFO("n " << n);
    const Tensor x = Tensor::randn({n}, gen, 0.5f, 2.f);
    for (const bool is_mean : {false, true}) {
      auto f = [is_mean](const Tensor& t) { return is_mean ? qat::mean(t) : qat::sum(t); };
      Tensor xc = x.clone().set_requires_grad(true), xd = x.to(Device::cuda).set_requires_grad(true);
      Tensor yc = f(xc), yd = f(xd);
      REQUIRE(yd.device() == Device::cuda);
      yc.backward(Tensor::scalar(3.f));
      yd.backward(Tensor::scalar(3.f).to(Device::cuda));
      qat::testing::require_close(yd.to(Device::cpu), yc.detach(), 0, 2.5e-7, is_mean ? "mean" : "sum");
      check_same_bits(xd.grad(), xc.grad(), is_mean ? "mean backward" : "sum backward");
    }
  }
  CHECK(qat::sum(Tensor::zeros({0}, DType::f32, Device::cuda)).item() == 0.f);
}

TEST_CASE("cuda twins: relu, relu6 and hardswish equal the CPU ops bit for bit, at their kinks too", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  Generator gen(41);
  Tensor x = Tensor::randn({3, 5, 7, 11}, gen).mul_(4.f);
  float* p = x.data<float>();
  const float kinks[] = {-3.f, 0.f, -0.f, 3.f, 6.f, -2.5f, 5.99f, 6.01f};
  for (int64_t i = 0; i < x.numel(); i += 7) p[i] = kinks[(i / 7) % 8];
  const Tensor g = Tensor::randn(x.sizes(), gen);
  check_twin_exact([](const Tensor& t) { return qat::relu(t); }, x, g, "relu");
  check_twin_exact([](const Tensor& t) { return qat::relu6(t); }, x, g, "relu6");
  check_twin_exact([](const Tensor& t) { return qat::hardswish(t); }, x, g, "hardswish");
}
