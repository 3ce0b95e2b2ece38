// FakeQuantizer / QAT module behaviour: frozen qparams, checkpoint state,
// BN folding equivalence and robustness.
#include <cmath>
#include <unistd.h>

#include <filesystem>

#include "tests/test_util.h"

#include "core/cpu_features.h"
#include "models/checkpoint.h"
#include "models/models.h"
#include "quant/observe/minmax.h"
#include "quant/sim/avg_pool_on_grid.h"
#include "quant/sim/lsq.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"

using namespace qat;
using namespace qat::quant;

namespace {

Backend default_backend() {
  Backend b;
  b.name = "default";
  b.patterns = {Pattern::conv, Pattern::conv_relu, Pattern::conv_bn, Pattern::conv_bn_relu, Pattern::linear,
                Pattern::linear_relu};
  b.activation.is_signed = false;
  return b;
}

}  // namespace

TEST_CASE("with observers off, the stored qparams are exactly those the last forward used", "[quant][qat]") {
  QuantizerConfig cfg;
  cfg.spec.is_signed = false;
  cfg.spec.symmetric = false;
  const auto fq_ptr = make_fake_quantizer(cfg, 1);
  FakeQuantizer& fq = *fq_ptr;
  fq.train();
  Generator g(2);
  fq.forward(Tensor::randn({4, 8}, g));
  const float s1 = fq.qparams().scale.item();
  fq.set_observer_enabled(false);
  Tensor x = mul(Tensor::randn({4, 8}, g), 10.f);  // a much wider range: must not move the qparams
  Tensor y = fq.forward(x);
  REQUIRE(fq.qparams().scale.item() == s1);
  // and the output is exactly fake_quantize with those stored qparams
  Tensor ref = fake_quantize(x, fq.qparams().scale, fq.qparams().zero_point, cfg.spec);
  REQUIRE(y.to_vector() == ref.to_vector());
}

TEST_CASE("quantizer state (per-channel buffers, flags) round-trips through a checkpoint", "[quant][qat]") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("qat_test_qstate_" + std::to_string(::getpid()) + ".safetensors")).string();
  ModulePtr a = make_model("small_cnn", 4, 0);
  prepare(*a, default_backend(), QConfig{});
  Generator g(3);
  a->train();
  a->forward(Tensor::randn({4, 3, 8, 8}, g));
  disable_observers(*a);
  save_checkpoint(path, *a, nullptr);

  ModulePtr b = make_model("small_cnn", 4, 9);
  prepare(*b, default_backend(), QConfig{});
  load_checkpoint(path, *b, nullptr);
  auto qa = fake_quantizers(*a), qb = fake_quantizers(*b);
  REQUIRE(qa.size() == qb.size());
  for (size_t i = 0; i < qa.size(); ++i) {
    REQUIRE(qb[i]->qparams().scale.sizes() == qa[i]->qparams().scale.sizes());
    REQUIRE(qb[i]->qparams().scale.to_vector() == qa[i]->qparams().scale.to_vector());
    REQUIRE_FALSE(qb[i]->observer_enabled());
  }
  // Same outputs in eval.
  a->eval();
  b->eval();
  NoGradGuard ng;
  Tensor x = Tensor::randn({2, 3, 8, 8}, g);
  REQUIRE(a->forward(x).to_vector() == b->forward(x).to_vector());
  std::filesystem::remove(path);
}

TEST_CASE("QAT Conv+BN in eval equals conv with the folded, quantized weight plus folded bias", "[quant][qat]") {
  Generator g(5);
  Conv2d conv({3, 4, 3, 1, 1, 1, 1, false}, g);
  auto bn = std::make_shared<BatchNorm2d>(4);
  {
    NoGradGuard ng;
    bn->running_mean.copy_(Tensor::randn({4}, g));
    bn->running_var.copy_(add(mul(Tensor::uniform({4}, g, 0.f, 1.f), 2.f), 0.1f));
    bn->weight.copy_(Tensor::randn({4}, g));
    bn->bias.copy_(Tensor::randn({4}, g));
  }
  QuantizerConfig wcfg;
  QatConv2d q(conv, bn, false, wcfg);
  q.train();
  Tensor x = Tensor::randn({2, 3, 6, 6}, g);
  q.forward(x);  // observe the folded weight once
  q.eval();
  NoGradGuard ng;
  Tensor y = q.forward(x);
  const QParams wq = q.weight_fake_quant->qparams();
  Tensor w_q = fake_quantize(q.folded_weight(), wq.scale, wq.zero_point, q.weight_fake_quant->config().spec);
  Tensor ref = conv2d(x, w_q, q.folded_bias(), q.params);
  qat::testing::require_close(y, ref, 1e-5, 1e-4, "eval ConvBn vs folded conv");
}

TEST_CASE("a BN channel with zero gamma or zero variance gives no NaN", "[quant][qat]") {
  Generator g(6);
  Conv2d conv({2, 3, 3, 1, 1, 1, 1, false}, g);
  auto bn = std::make_shared<BatchNorm2d>(3);
  {
    NoGradGuard ng;
    bn->weight.copy_(Tensor::from_vector({0.f, 1.f, -0.f}, {3}));
    bn->running_var.copy_(Tensor::from_vector({0.f, 1e-30f, 1.f}, {3}));
  }
  QatConv2d q(conv, bn, true, QuantizerConfig{});
  q.train();
  Tensor x = Tensor::randn({2, 2, 5, 5}, g).set_requires_grad(true);
  Tensor loss = sum(q.forward(x));
  loss.backward();
  for (float v : x.grad().to_vector()) REQUIRE(std::isfinite(v));
  for (float v : q.weight.grad().to_vector()) REQUIRE(std::isfinite(v));
  q.eval();
  NoGradGuard ng;
  for (float v : q.forward(x).to_vector()) REQUIRE(std::isfinite(v));
}

TEST_CASE("fake_quantize backward gives the same gradient in place as into a new tensor", "[quant][qat]") {
  QuantSpec spec;
  spec.bits = 4;
  Generator g(8);
  Tensor x = mul(Tensor::randn({6, 50}, g), 3.f).set_requires_grad(true);
  Tensor scale = Tensor::from_vector({0.25f}, {1});
  Tensor zp = Tensor::zeros({1}, DType::i32);
  Tensor r = Tensor::randn({6, 50}, g);
  // 1. upstream gradient held by the caller: a new tensor is written
  fake_quantize(x, scale, zp, spec).backward(r);
  const std::vector<float> expected = x.grad().to_vector();
  x.zero_grad();
  // 2. upstream gradient fresh from mul's backward: updated in place
  sum(mul(fake_quantize(x, scale, zp, spec), r)).backward();
  REQUIRE(x.grad().to_vector() == expected);
  int clipped = 0;
  for (float v : expected) clipped += v == 0.f;
  REQUIRE(clipped > 0);  // the case exercises the clipping
}

// The fused kernel (AVX-512 where the CPU has it) and its bit mask for the
// clipped STE against the plain ops: rows whose length is not a multiple of
// 16 and long ones (the backward skips all-pass words four at a time), NaN
// weights (NaN stays NaN, its gradient stopped), huge ones (clipped), and a
// NaN upstream gradient at a clipped place (NaN * 0 = NaN, as PyTorch).
// Above 64 MB the fused kernel streams its output past the caches
// (non-temporal stores): the same bits and gradients as the plain ops.
TEST_CASE("fused per-channel observe-and-quantize of a weight beyond the caches equals the plain ops",
          "[quant][qat]") {
  QuantSpec spec;
  spec.per_channel = true;
  spec.axis = 0;
  const Shape shape{1040, 16384};  // 68 MB
  if (!cpu_has_avx512_rows()) WARN("no AVX-512 F/BW/VL here: the streamed kernel is not reached, the plain one is tested");
  MinMaxObserver fused(spec, shape[0]), ref(spec, shape[0]);
  Generator g(11);
  Tensor w = Tensor::randn(shape, g);
  w.data<float>()[5] = 1e30f;  // outside every grid: its gradient stopped
  w.set_requires_grad(true);
  ref.observe(w);
  const QParams q = ref.qparams();
  Tensor y = observe_and_fake_quantize(fused, w, SteKind::clipped);
  REQUIRE(testing::same_bits(fused.max_val(), ref.max_val()));
  Tensor y_ref = fake_quantize(w, q.scale, q.zero_point, spec);
  REQUIRE(testing::same_bits(y, y_ref));
  const Tensor r = Tensor::randn(shape, g);
  y.backward(r);
  const Tensor g_fused = w.grad().clone();
  w.zero_grad();
  y_ref.backward(r);
  REQUIRE(testing::same_bits(g_fused, w.grad()));
}

TEST_CASE("fused per-channel observe-and-quantize equals observe then fake_quantize", "[quant][qat]") {
  QuantSpec spec;
  spec.per_channel = true;
  spec.axis = 0;
  spec.bits = 4;
  for (const Shape& shape : {Shape{8, 3, 5, 5}, Shape{6, 300}}) {
    INFO(shape_str(shape));
    const int64_t C = shape[0];
    MovingAverageMinMaxObserver fused(spec, C, 0.1f), ref(spec, C, 0.1f);
    Generator g(9);
    for (int step = 0; step < 3; ++step) {
      Tensor w = Tensor::randn(shape, g);
      if (step == 2) {
        w.data<float>()[7] = std::nanf("");
        w.data<float>()[w.numel() - 1] = 1e30f;
        w.data<float>()[w.numel() / 2] = -3e4f;
      }
      w.set_requires_grad(true);
      QParams used;
      Tensor y = observe_and_fake_quantize(fused, w, SteKind::clipped, &used);
      ref.observe(w);
      const QParams q = ref.qparams();
      Tensor y_ref = fake_quantize(w, q.scale, q.zero_point, spec);
      REQUIRE(testing::same_bits(fused.min_val(), ref.min_val()));
      REQUIRE(testing::same_bits(fused.max_val(), ref.max_val()));
      REQUIRE(testing::same_bits(used.scale, q.scale));
      REQUIRE(testing::same_bits(y, y_ref));
      Tensor r = Tensor::randn(w.sizes(), g);
      r.data<float>()[w.numel() - 1] = std::nanf("");  // at a clipped weight
      // Steps 0 and 2: the upstream gradient is fresh from mul's backward
      // (updated in place); step 1: the caller's tensor (copied).
      if (step != 1) {
        sum(mul(y, r)).backward();
        sum(mul(y_ref, r)).backward();
      } else {
        y.backward(r);
        const Tensor g1 = w.grad().clone();
        w.zero_grad();
        y_ref.backward(r);
        REQUIRE(testing::same_bits(g1, w.grad()));
        continue;
      }
      // both gradients accumulated into w.grad: compare against twice the plain one
      Tensor twice = w.grad();
      w.zero_grad();
      sum(mul(fake_quantize(w, q.scale, q.zero_point, spec), r)).backward();
      REQUIRE(testing::same_bits(twice, add(w.grad(), w.grad())));
    }
  }
}

// The wiring of a learned quantizer: its step's gradient carries the LSQ
// gradient scale g = 1 / sqrt(N Q_P) with N the weights per step (one output
// channel) or the features per example, written out here rather than taken
// from lsq_grad_scale.
TEST_CASE("learned quantizers scale their step's gradient by 1/sqrt(N Qp)", "[quant][qat]") {
  Generator g(12);
  for (const bool is_weight : {true, false}) {
    INFO((is_weight ? "weights" : "activations"));
    QuantizerConfig cfg;
    cfg.method = QuantMethod::lsq;
    cfg.spec.bits = 4;
    cfg.spec.per_channel = is_weight;
    cfg.spec.is_signed = is_weight;
    cfg.is_weight = is_weight;
    const int64_t C = 5, K = 36;  // weights (C, K) per channel; activations (batch C, K features)
    auto fq = make_fake_quantizer(cfg, is_weight ? C : 1);
    fq->train();
    Tensor v = is_weight ? Tensor::randn({C, K}, g) : relu(Tensor::randn({C, K}, g));
    Tensor r = Tensor::randn({C, K}, g);
    sum(mul(fq->forward(v), r)).backward();
    Tensor step_param;
    for (auto& [name, p] : fq->named_parameters())
      if (name == "step") step_param = p;
    REQUIRE(step_param.defined());
    const double qp = is_weight ? 7.0 : 15.0;
    const float expected_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(K) * qp));
    Tensor step = step_param.detach().clone().set_requires_grad(true);
    sum(mul(lsq_quantize(v, step, cfg.spec, expected_scale), r)).backward();
    REQUIRE(step_param.grad().to_vector() == step.grad().to_vector());
  }
}

// Ops that keep their input's grid (average pooling) re-apply the source
// quantizer's grid; for LSQ+ that is v = s q + beta, whose zero point
// -beta / s is fractional: every output must lie on it.
TEST_CASE("a shared LSQ+ quantizer puts its outputs on the LSQ+ grid", "[quant][qat]") {
  QuantizerConfig cfg;
  cfg.method = QuantMethod::lsq_plus;
  cfg.spec.bits = 4;
  cfg.spec.is_signed = false;
  cfg.spec.symmetric = false;
  const auto source = make_fake_quantizer(cfg, 1);
  source->train();
  Generator g(21);
  source->forward(Tensor::randn({8, 40}, g));  // initialises step and offset
  const float s = source->qparams().scale.item();
  Tensor offset = source->learned_offset();
  offset.data<float>()[0] = -2.37f * s;  // as training may leave it: zero point 2.37
  const float beta = offset.item();
  SharedFakeQuantizer shared(source);
  const std::vector<float> y = shared.forward(Tensor::randn({8, 40}, g)).to_vector();
  for (float v : y) {
    const float q = (v - beta) / s;
    INFO("output " << v << " = " << q << " steps from beta");
    REQUIRE(std::abs(q - std::nearbyint(q)) < 1e-4f);
    REQUIRE(std::nearbyint(q) >= 0);
    REQUIRE(std::nearbyint(q) <= 15);
  }
}

// Note [a mean rounded onto its grid]: the fake-quant average pool rounds a
// window's mean as the integer kernel does, floor(sum / count + 1/2) of the
// integers, ties included; its gradient is the plain pool's.
TEST_CASE("the average pool on a grid rounds a mean's tie up, as the integer kernel, with the pool's gradient",
          "[quant][qat]") {
  const auto source = make_fake_quantizer(QuantizerConfig{}, 1);
  source->set_qparams({Tensor::from_vector({0.1f}, {1}), Tensor::from_vector_i32({3}, {1})});
  auto pool = std::make_shared<AdaptiveAvgPool2d>(2, 2);  // 5x5 -> 2x2: overlapping 3x3 windows (count 9)
  AvgPoolOnGrid on_grid(pool, std::make_shared<SharedFakeQuantizer>(source));
  Generator g(5);
  const int64_t C = 64, H = 5, W = 5;
  std::vector<int32_t> u(static_cast<size_t>(C * H * W));
  std::vector<float> values(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    u[i] = static_cast<int32_t>(g.next_u64() % 40);
    values[i] = 0.1f * static_cast<float>(u[i] - 3);
  }
  const Tensor x = source->apply_frozen(Tensor::from_vector(values, {1, C, H, W})).set_requires_grad(true);
  const Tensor y = on_grid.forward(x);
  std::vector<float> want_q;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        int64_t sum = 0;
        for (int64_t a = 2 * i; a < 2 * i + 3; ++a)
          for (int64_t b = 2 * j; b < 2 * j + 3; ++b) sum += u[static_cast<size_t>((c * H + a) * W + b)];
        want_q.push_back(0.1f * static_cast<float>((2 * sum + 9) / 18 - 3));
      }
  REQUIRE(y.to_vector() == source->apply_frozen(Tensor::from_vector(want_q, {1, C, 2, 2})).to_vector());
  // A 4x4 global pool (count 16): a mean on k + 1/2 one time in 16.
  auto global = std::make_shared<AdaptiveAvgPool2d>(1, 1);
  AvgPoolOnGrid on_grid16(global, std::make_shared<SharedFakeQuantizer>(source));
  const Tensor x16 = source->apply_frozen(Tensor::from_vector(
      std::vector<float>(values.begin(), values.begin() + C * 16), {1, C, 4, 4})).set_requires_grad(true);
  const Tensor y16 = on_grid16.forward(x16);
  std::vector<float> want16;
  int64_t ties = 0;
  for (int64_t c = 0; c < C; ++c) {
    int64_t sum = 0;
    for (int64_t k = 0; k < 16; ++k) sum += u[static_cast<size_t>(c * 16 + k)];
    ties += sum % 16 == 8;
    want16.push_back(0.1f * static_cast<float>((2 * sum + 16) / 32 - 3));
  }
  REQUIRE(ties >= 3);
  REQUIRE(y16.to_vector() == source->apply_frozen(Tensor::from_vector(want16, {1, C, 1, 1})).to_vector());
  // A 16x16 window (count 256): the exact mean decides, not the float one.
  AvgPoolOnGrid on_grid256(std::make_shared<AdaptiveAvgPool2d>(1, 1), std::make_shared<SharedFakeQuantizer>(source));
  std::vector<int32_t> u256(static_cast<size_t>(C * 256));
  std::vector<float> values256(u256.size());
  for (size_t i = 0; i < u256.size(); ++i) {
    u256[i] = static_cast<int32_t>(g.next_u64() % 120);  // (inside the grid: values up to 11.6)
    values256[i] = 0.1f * static_cast<float>(u256[i] - 3);
  }
  const Tensor y256 =
      on_grid256.forward(source->apply_frozen(Tensor::from_vector(values256, {1, C, 16, 16})));
  std::vector<float> want256;
  for (int64_t c = 0; c < C; ++c) {
    int64_t sum = 0;
    for (int64_t k = 0; k < 256; ++k) sum += u256[static_cast<size_t>(c * 256 + k)];
    want256.push_back(0.1f * static_cast<float>((2 * sum + 256) / 512 - 3));
  }
  REQUIRE(y256.to_vector() == source->apply_frozen(Tensor::from_vector(want256, {1, C, 1, 1})).to_vector());
  // The gradient: the pool's (every mean lies inside the grid's range).
  sum(y16).backward();
  Tensor plain = x16.detach().set_requires_grad(true);
  sum(global->forward(plain)).backward();
  REQUIRE(x16.grad().to_vector() == plain.grad().to_vector());
}
