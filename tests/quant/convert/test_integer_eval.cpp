// Note [integer eval]: with quant.integer_forward, a QAT model's eval
// forward is its frozen integer model's, value for value; training is not
// changed.
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/graph.h"
#include "models/models.h"
#include "quant/convert/compare_layers.h"
#include "quant/convert/freeze.h"
#include "quant/convert/integer_eval.h"
#include "quant/integer/int_add.h"
#include "quant/sim/int8_training.h"
#include "quant/sim/prepare.h"
#include "tests/graph_checks.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

// MobileNetV2 (32 px stem) prepared on the default backend, its layers on
// the integer forward, with or without their integer eval.
ModulePtr mobilenet(QuantMethod method, bool integer_eval) {
  ModulePtr m = make_model("mobilenet_v2", 10, 3, ModelOptions{ResNetStem::small});
  QConfig q;
  q.method = method;
  prepare(*m, testing::test_backend("default"), q);
  const std::vector<IntegerForwardLayer> layers =
      integer_eval ? enable_integer_forward(*m, make_integer_eval, make_add_eval) : enable_integer_forward(*m);
  for (const IntegerForwardLayer& l : layers) REQUIRE(l.integer_eval == integer_eval);
  return m;
}

Tensor images(uint64_t seed) {
  Generator g(seed);
  return Tensor::randn({8, 3, 32, 32}, g);
}

// SGD steps; the optimizer changes every learned step after its last forward.
std::vector<float> train_steps(Module& m, int steps) {
  return testing::sgd_steps(m, images(5), Tensor::from_vector_i32({0, 1, 2, 3, 4, 5, 6, 7}, {8}), steps, 0.05f);
}

}  // namespace

TEST_CASE("integer eval: MobileNetV2's eval forward is its frozen integer model's, every node and logit bit for bit",
          "[quant][freeze][integer_eval]") {
  for (const QuantMethod method : {QuantMethod::moving_average, QuantMethod::lsq}) {
    INFO("method " << method_name(method));
    ModulePtr m = mobilenet(method, true);
    train_steps(*m, 3);
    m->eval();
    NoGradGuard ng;
    const Tensor x = images(9);
    // The first eval batch after an optimizer step: each learned output
    // step has moved since its quantizer's last forward.
    const Tensor first = m->forward(x);
    const IntegerModel im = freeze(*m);
    REQUIRE(testing::same_bits(first, im.forward(x)));
    for (const LayerDiff& d : compare_layers(*m, im, x)) {
      INFO("layer " << d.name << " (" << d.op << "): " << d.differ << " of " << d.count << " differ, max "
                    << d.max_diff);
      REQUIRE(d.differ == 0);
      REQUIRE(d.own_differ == 0);
    }
  }
}

// Without it the same model's logits are the float op's (the classifier's
// sum and bias in float): not the integer model's bits. What the test above
// holds is then not true by construction of the comparison.
TEST_CASE("integer eval: without it, the fake-quant logits are not the integer model's bits",
          "[quant][freeze][integer_eval]") {
  ModulePtr m = mobilenet(QuantMethod::moving_average, false);
  train_steps(*m, 3);
  m->eval();
  NoGradGuard ng;
  const Tensor x = images(9);
  const Tensor fake = m->forward(x);
  REQUIRE_FALSE(testing::same_bits(fake, freeze(*m).forward(x)));
}

TEST_CASE("integer eval: training steps and a forward with gradients are unchanged", "[quant][integer_eval]") {
  ModulePtr with = mobilenet(QuantMethod::lsq, true), without = mobilenet(QuantMethod::lsq, false);
  REQUIRE(train_steps(*with, 3) == train_steps(*without, 3));
  testing::require_same_tensors(with->state_dict(), without->state_dict());
  with->eval();
  without->eval();
  const Tensor x = images(9);
  REQUIRE(testing::same_bits(with->forward(x), without->forward(x)));  // eval, but gradients on: the fake-quant ops
}

// INT8 training sets it too, on its layers and its residual adds: its
// forward is on integers already, its eval now the integer model's to the
// bit, every node. (A float add differs from the integer add on a few
// values in a million, none of them in these images: the counts hold that
// each of the 10 adds ran as the integer add.)
TEST_CASE("integer eval: an INT8-trained MobileNetV2's eval forward is its frozen integer model's",
          "[quant][freeze][integer_eval][int8train]") {
  ModulePtr m = make_model("mobilenet_v2", 10, 3, ModelOptions{ResNetStem::small});
  prepare(*m, testing::test_backend("default"), QConfig{});
  int made = 0, ran = 0;
  const AddEvalFactory counted = [&](Graph& g, const std::string& node, const std::shared_ptr<FakeQuantizer>& a,
                                     const std::shared_ptr<FakeQuantizer>& b) -> Graph::AddEval {
    ++made;
    Graph::AddEval e = make_add_eval(g, node, a, b);
    REQUIRE(e);
    return [e, &ran](const Tensor& x, const Tensor& y) {
      Tensor v = e(x, y);  // (undefined: it did not apply, and the graph adds in float)
      ran += v.defined();
      return v;
    };
  };
  REQUIRE(enable_int8_training(*m, Int8GradConfig{}, {}, 11, make_integer_eval, counted).size() == 53);
  REQUIRE(made == 10);
  train_steps(*m, 2);
  REQUIRE(ran == 0);  // (training: the float sum)
  m->eval();
  NoGradGuard ng;
  const Tensor x = images(9);
  const Tensor first = m->forward(x);
  REQUIRE(ran == 10);
  const IntegerModel im = freeze(*m);
  REQUIRE(testing::same_bits(first, im.forward(x)));
  for (const LayerDiff& d : compare_layers(*m, im, x)) {
    INFO("layer " << d.name << " (" << d.op << "): " << d.differ << " of " << d.count << " differ");
    REQUIRE(d.differ == 0);
  }
}

namespace {
std::shared_ptr<FakeQuantizer> fixed_grid(float scale) {  // signed 8-bit, zero point 0
  auto q = make_fake_quantizer(QuantizerConfig{}, 1);
  q->set_qparams({Tensor::from_vector({scale}, {1}), Tensor::from_vector_i32({0}, {1})});
  return q;
}
}  // namespace

// Note [integer add]: on inputs of half the output's scale every odd sum of
// integers is a tie, which the float sum of the two values, each rounded to
// float, puts on either side. The add's integer eval gives the integer add's
// value for every pair of inputs; the float sum through the quantizer
// differs on some.
TEST_CASE(
    "integer eval of a residual add: the integer add's value for every pair of inputs, where the float sum "
    "is not",
    "[quant][integer_eval]") {
  const float sy = 0.0529f;
  const auto a = fixed_grid(sy / 2), b = fixed_grid(sy / 2), out = fixed_grid(sy);
  Graph g;
  g.add("a", a, Graph::kInput);
  g.add("b", b, Graph::kInput);
  g.add_op("sum", GraphOp::add, {"a", "b"});
  g.add("sum_quant", out, "sum");
  g.set_output("sum_quant");
  const Graph::AddEval eval = make_add_eval(g, "sum", a, b);
  REQUIRE(eval);
  std::vector<float> va, vb;
  for (int qa = -128; qa < 128; ++qa)
    for (int qb = -128; qb < 128; ++qb) va.push_back(sy / 2 * qa), vb.push_back(sy / 2 * qb);
  const Shape shape{1, 256, 256, 1};
  const Tensor xa = Tensor::from_vector(va, shape), xb = Tensor::from_vector(vb, shape);
  g.eval();
  NoGradGuard ng;
  const Tensor y = eval(xa, xb), fake = out->forward(add(xa, xb));
  const ActQuant grid_in{sy / 2, 0, 0.f, 8, true}, grid_out{sy, 0, 0.f, 8, true};
  const AddRequant r = make_add_requant(grid_in, grid_in, grid_out, false, "test");
  int64_t float_differs = 0;
  for (int i = 0; i < 256 * 256; ++i) {
    const int32_t qa = i / 256 - 128, qb = i % 256 - 128;
    const int32_t want = add_requant_value(qa + 128, qb + 128, r) - 128;
    INFO("q_a " << qa << ", q_b " << qb);
    REQUIRE(std::nearbyint(y.data<float>()[i] / sy) == want);
    float_differs += std::nearbyint(fake.data<float>()[i] / sy) != want;
  }
  INFO("the float sum differs on " << float_differs << " of 65536 pairs");
  REQUIRE(float_differs > 0);
}
