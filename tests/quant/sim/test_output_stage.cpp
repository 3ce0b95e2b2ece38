// Note [the output quantizer inside batch norm] (quant/sim/fake_quantizer.cpp):
// a QAT Conv+BN layer's output quantizer run inside batch_norm_scaled gives
// what the quantizer's forward after the op gives, bit for bit: output,
// gradients, running statistics, observer state and qparams.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>

#include "core/autograd.h"
#include "core/ops.h"
#include "models/models.h"
#include "quant/observe/minmax.h"
#include "quant/sim/fake_quantizer.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;
using qat::testing::rand_tensor;
using qat::testing::same_bits;

namespace {

struct Case {
  BnActivation act;
  QuantMethod method;
  SteKind ste;
  bool observer_on, training;
};

std::shared_ptr<ObserverFakeQuantizer> quantizer(const Case& k) {
  QuantizerConfig cfg;
  cfg.spec.bits = 8;
  cfg.spec.is_signed = false;
  cfg.spec.symmetric = false;
  cfg.method = k.method;
  cfg.ste = k.ste;
  auto q = std::dynamic_pointer_cast<ObserverFakeQuantizer>(make_fake_quantizer(cfg, 1));
  REQUIRE(q);
  q->train(true);
  // A narrower range seen first, so that the batch below is clipped.
  q->forward(mul(rand_tensor({64}, 7), 0.5f));
  q->set_observer_enabled(k.observer_on);
  q->train(k.training);
  return q;
}

struct Run {
  Tensor y, gx, gs, gw, gb, rm, rv, scale, zero_point, min_val, max_val;
};

// fused: the quantizer inside the op; else the op, then its forward.
Run run(const Case& k, bool fused) {
  const Shape shape{4, 6, 9, 9};
  Tensor x = rand_tensor(shape, 30).detach().set_requires_grad(true);
  Tensor s = add(mul(rand_tensor({6}, 31), 0.7f), 1.1f).detach().set_requires_grad(true);
  Tensor w = mul(rand_tensor({6}, 32), 8.f).detach().set_requires_grad(true);  // crosses ReLU6's upper kink
  Tensor b = rand_tensor({6}, 33).detach().set_requires_grad(true);
  Run r;
  r.rm = mul(rand_tensor({6}, 34), 0.1f);
  r.rv = add(mul(rand_tensor({6}, 35), 0.1f), 1.f);
  std::shared_ptr<ObserverFakeQuantizer> q = quantizer(k);
  if (fused) {
    const std::unique_ptr<BnOutputStage> stage = q->inside_stage(x);
    REQUIRE(stage);
    r.y = batch_norm_scaled(x, s, w, b, r.rm, r.rv, k.training, 0.1f, 1e-5f, k.act, stage.get());
  } else {
    r.y = q->forward(batch_norm_scaled(x, s, w, b, r.rm, r.rv, k.training, 0.1f, 1e-5f, k.act));
  }
  r.y.backward(rand_tensor(shape, 36));
  r.gx = x.grad(), r.gs = s.grad(), r.gw = w.grad(), r.gb = b.grad();
  r.scale = q->qparams().scale, r.zero_point = q->qparams().zero_point;
  const auto& obs = dynamic_cast<const MinMaxStateObserver&>(q->observer());
  r.min_val = obs.min_val(), r.max_val = obs.max_val();
  return r;
}

const char* act_name(BnActivation a) {
  return a == BnActivation::relu ? "relu" : a == BnActivation::relu6 ? "relu6" : "none";
}

}  // namespace

TEST_CASE("the output quantizer inside batch norm equals its forward after the op bit for bit",
          "[quant][qat][batchnorm]") {
  for (const BnActivation act : {BnActivation::none, BnActivation::relu, BnActivation::relu6}) {
    for (const QuantMethod method : {QuantMethod::moving_average, QuantMethod::minmax}) {
      for (const SteKind ste : {SteKind::clipped, SteKind::plain}) {
        for (const std::array<bool, 2> on_training : {std::array<bool, 2>{true, true}, {false, true}, {true, false}}) {
          const Case k{act, method, ste, on_training[0], on_training[1]};
          INFO(act_name(act) << ", " << method_name(method) << (ste == SteKind::clipped ? ", clipped" : ", plain")
                             << (k.observer_on ? ", observer on" : ", observer off")
                             << (k.training ? ", training" : ", eval"));
          qat::testing::ThreadsGuard guard(2);
          const Run a = run(k, true), b = run(k, false);
          CHECK(same_bits(a.y, b.y));
          CHECK(same_bits(a.gx, b.gx));
          CHECK(same_bits(a.gs, b.gs));
          CHECK(same_bits(a.gw, b.gw));
          CHECK(same_bits(a.gb, b.gb));
          CHECK(same_bits(a.rm, b.rm));
          CHECK(same_bits(a.rv, b.rv));
          CHECK(same_bits(a.scale, b.scale));
          CHECK(same_bits(a.zero_point, b.zero_point));
          CHECK(same_bits(a.min_val, b.min_val));
          CHECK(same_bits(a.max_val, b.max_val));
        }
      }
    }
  }
}

// The comparison above is not empty: the output is clipped (the clipped
// STE stops some gradients) and, observing, the batch moves the range.
TEST_CASE("the output quantizer inside batch norm: the test batch clips and moves the observer",
          "[quant][qat][batchnorm]") {
  const Case k{BnActivation::relu6, QuantMethod::moving_average, SteKind::clipped, true, true};
  const Run clipped = run(k, true);
  Case plain = k;
  plain.ste = SteKind::plain;
  const Run passed = run(plain, true);
  CHECK_FALSE(same_bits(clipped.gx, passed.gx));
  const std::shared_ptr<ObserverFakeQuantizer> before = quantizer(k);
  const auto& obs = dynamic_cast<const MinMaxStateObserver&>(before->observer());
  CHECK_FALSE(same_bits(obs.max_val(), clipped.max_val));
}

// Where it cannot run inside (per-channel, fake quantization off,
// calibrating), it says so and the layer runs its forward after the op.
TEST_CASE("the output quantizer inside batch norm: refused where forward() would do otherwise", "[quant][qat]") {
  const Case k{BnActivation::none, QuantMethod::moving_average, SteKind::clipped, true, true};
  const Tensor x = rand_tensor({2, 3, 4, 4}, 1);
  CHECK(quantizer(k)->inside_stage(x) != nullptr);
  std::shared_ptr<ObserverFakeQuantizer> off = quantizer(k);
  off->set_fake_quant_enabled(false);
  CHECK(off->inside_stage(x) == nullptr);
  std::shared_ptr<ObserverFakeQuantizer> calibrating = quantizer(k);
  calibrating->set_calibrating(true);
  CHECK(calibrating->inside_stage(x) == nullptr);
  QuantizerConfig cfg;
  cfg.spec.per_channel = true;
  cfg.spec.axis = 1;
  auto per_channel = std::dynamic_pointer_cast<ObserverFakeQuantizer>(make_fake_quantizer(cfg, 3));
  CHECK(per_channel->inside_stage(x) == nullptr);
}

// In a prepared MobileNetV2 in training, every Conv+BN layer with an
// output quantizer runs it inside (so the test below compares the two paths).
TEST_CASE("the output quantizer inside batch norm: every Conv+BN layer of a QAT MobileNetV2 takes it",
          "[quant][qat]") {
  ModulePtr m = make_model("mobilenet_v2", 10, 3, ModelOptions{ResNetStem::small});
  prepare(*m, testing::test_backend("default"), QConfig{});
  m->train(true);
  const Tensor x = Tensor::zeros({2, 8, 4, 4});
  int layers = 0, inside = 0;
  for (const auto& [name, mod] : m->named_modules()) {
    auto* qc = dynamic_cast<QatConv2d*>(mod);
    if (!qc || !qc->bn || !qc->activation_post_process) continue;
    ++layers;
    auto* q = dynamic_cast<ObserverFakeQuantizer*>(qc->activation_post_process.get());
    INFO(name);
    CHECK(q != nullptr);
    if (q && q->inside_stage(x)) ++inside;
  }
  CHECK(layers >= 30);
  CHECK(inside == layers);
}

// A whole QAT MobileNetV2 (every Conv+BN+ReLU6 and Conv+BN layer): training
// steps and an eval forward with the quantizers inside and after.
TEST_CASE("the output quantizer inside batch norm: QAT MobileNetV2 trains to the same bits", "[quant][qat]") {
  std::array<TensorMap, 2> states;
  std::array<std::vector<float>, 2> losses;
  std::array<Tensor, 2> logits;
  for (const bool inside : {true, false}) {
    set_output_quantizer_inside_bn(inside);
    ModulePtr m = make_model("mobilenet_v2", 10, 3, ModelOptions{ResNetStem::small});
    prepare(*m, testing::test_backend("default"), QConfig{});
    Generator g(5);
    const Tensor x = Tensor::randn({8, 3, 32, 32}, g);
    losses[inside] = testing::sgd_steps(*m, x, Tensor::from_vector_i32({0, 1, 2, 3, 4, 5, 6, 7}, {8}), 3, 0.05f);
    m->eval();
    NoGradGuard ng;
    logits[inside] = m->forward(x);
    states[inside] = m->state_dict();
  }
  set_output_quantizer_inside_bn(true);
  CHECK(losses[0] == losses[1]);
  CHECK(same_bits(logits[0], logits[1]));
  REQUIRE(states[0].size() == states[1].size());
  for (const auto& [name, t] : states[1]) {
    INFO(name);
    CHECK(same_bits(t, states[0].at(name)));
  }
}

// Stored qparams off the grid (a crafted calibration cache, say) get
// fake_quantize's error inside the op as after it.
TEST_CASE("the output quantizer inside batch norm: a zero point off the grid is refused as fake_quantize refuses it",
          "[quant][qat]") {
  const Case k{BnActivation::relu6, QuantMethod::moving_average, SteKind::clipped, false, true};
  for (const bool fused : {true, false}) {
    INFO((fused ? "inside" : "after"));
    std::shared_ptr<ObserverFakeQuantizer> q = quantizer(k);
    q->set_qparams({Tensor::from_vector({0.1f}, {1}), Tensor::from_vector_i32({300}, {1})});
    const Tensor x = rand_tensor({2, 3, 4, 4}, 2), s = Tensor::ones({3});
    auto op = [&] {
      const std::unique_ptr<BnOutputStage> stage = fused ? q->inside_stage(x) : nullptr;
      REQUIRE((stage != nullptr) == fused);
      Tensor y = batch_norm_scaled(x, s, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1f, 1e-5f,
                                   BnActivation::relu6, stage.get());
      if (!fused) y = q->forward(y);
    };
    CHECK_THROWS_WITH(op(), Catch::Contains("zero_point 300") && Catch::Contains("outside [0, 255]"));
  }
}
