// prepare(): plain float models become fused QAT models by the backend.
#include <cmath>

#include "tests/test_util.h"

#include "models/models.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

std::string type_at(Module& m, const std::string& name) {
  for (auto& [n, mod] : m.named_modules())
    if (n == name) return mod->type_name();
  return "<none>";
}

}  // namespace

TEST_CASE("prepare fuses AlexNet-BN into QAT blocks with quantizers in place", "[quant][prepare]") {
  ModulePtr m = make_model("alexnet_bn", 10, 0);
  const PrepareReport r = prepare(*m, testing::test_backend("default"), QConfig{});
  std::vector<std::string> names, patterns;
  for (auto& l : r.layers) names.push_back(l.name), patterns.push_back(l.pattern);
  REQUIRE(names == std::vector<std::string>{"features.0", "features.4", "features.8", "features.11", "features.14",
                                            "classifier.1", "classifier.4", "classifier.6"});
  REQUIRE(patterns == std::vector<std::string>{"conv+bn+relu", "conv+bn+relu", "conv+bn+relu", "conv+bn+relu",
                                               "conv+bn+relu", "linear+relu", "linear+relu", "linear"});
  REQUIRE(type_at(*m, "features.0") == "QatConvBnReLU2d");
  REQUIRE(type_at(*m, "features.1") == "Identity");
  REQUIRE(type_at(*m, "features.2") == "Identity");
  REQUIRE(type_at(*m, "features.3") == "MaxPool2d");
  REQUIRE(type_at(*m, "avgpool") == "Sequential");
  REQUIRE(type_at(*m, "avgpool.1") == "SharedFakeQuantize");
  REQUIRE(type_at(*m, "classifier.6") == "QatLinear");
  REQUIRE(r.layers.front().input.has_value());
  REQUIRE_FALSE(r.layers.back().output.has_value());  // logits stay float
  // The float weights are carried over under the same names.
  TensorMap sd = m->state_dict();
  REQUIRE(sd.count("features.0.weight"));
  REQUIRE(sd.count("features.0.bn.running_var"));
  REQUIRE(sd.count("features.0.weight_fake_quant.scale"));
  REQUIRE(sd.at("features.0.weight_fake_quant.scale").sizes() == Shape{64});  // per-channel
  REQUIRE(sd.count("features.0.input_fake_quant.zero_point"));
  // It still trains: one step runs forward and backward at the minimum size.
  Generator g(1);
  Tensor x = Tensor::randn({2, 3, 63, 63}, g);
  Tensor loss = cross_entropy(m->forward(x), Tensor::from_vector_i32({1, 2}, {2}));
  loss.backward();
  REQUIRE(std::isfinite(loss.item()));
  for (auto& [n, p] : m->named_parameters()) {
    INFO(n);
    REQUIRE(p.grad().defined());
  }
}

TEST_CASE("a pattern the backend does not list stays float", "[quant][prepare]") {
  ModulePtr m = make_model("small_cnn", 4, 0);
  Backend b = testing::test_backend("default");
  b.name = "convs-only";
  b.patterns = {Pattern::conv_bn_relu};
  const PrepareReport r = prepare(*m, b, QConfig{});
  REQUIRE(r.layers.size() == 2);
  REQUIRE(r.float_layers == std::vector<std::string>{"fc"});
  REQUIRE(type_at(*m, "fc") == "Linear");
  REQUIRE_THAT(r.to_string(), Contains("fc: left in float"));
}

TEST_CASE("backend constraints: tensorrt narrow symmetric int8, violations name layer and rule", "[quant][prepare]") {
  ModulePtr m = make_model("small_cnn", 4, 0);
  const PrepareReport r = prepare(*m, testing::test_backend("tensorrt"), QConfig{});
  REQUIRE(r.layers[0].weight.qmin() == -127);
  REQUIRE(r.layers[0].weight.qmax() == 127);
  REQUIRE(r.layers[0].input->is_signed);
  REQUIRE(r.layers[0].output->is_signed);

  QConfig affine;
  affine.weight_symmetric = false;
  ModulePtr m2 = make_model("small_cnn", 4, 0);
  REQUIRE_THROWS_WITH(prepare(*m2, testing::test_backend("tensorrt"), affine),
                      Contains("features.0") && Contains("tensorrt") && Contains("weights.symmetric"));
  QConfig nine;
  nine.weight_bits = 9;
  REQUIRE_THROWS_WITH(prepare(*make_model("small_cnn", 4, 0), testing::test_backend("tensorrt"), nine),
                      Contains("9-bit"));
}

TEST_CASE("per-layer overrides set bits by module name", "[quant][prepare]") {
  ModulePtr m = make_model("alexnet_bn", 10, 0);
  QConfig q;
  q.weight_bits = q.activation_bits = 4;
  q.method = QuantMethod::lsq;
  q.overrides["features.0"] = {8, 8};
  q.overrides["classifier.6"] = {8, 0};
  const PrepareReport r = prepare(*m, testing::test_backend("default"), q);
  REQUIRE(r.layers.front().weight.bits == 8);
  REQUIRE(r.layers.front().input->bits == 8);   // the activation features.0 reads
  REQUIRE(r.layers.front().output->bits == 4);  // read by features.4: 4-bit
  REQUIRE(r.layers[1].weight.bits == 4);
  REQUIRE(r.layers[1].output->bits == 4);
  REQUIRE(r.layers.back().weight.bits == 8);
  REQUIRE(r.layers[r.layers.size() - 2].output->bits == 4);  // classifier.6 keeps 4-bit inputs
  // 4-bit LSQ ranges are exactly [-8, 7] for weights and [0, 15] for activations
  REQUIRE(r.layers[1].weight.qmin() == -8);
  REQUIRE(r.layers[1].weight.qmax() == 7);
  REQUIRE(r.layers[1].output->qmin() == 0);
  REQUIRE(r.layers[1].output->qmax() == 15);

  // Note [activation overrides]: the last layer's activation_bits set its
  // input, the output of the layer before it (the layer has no output
  // quantizer of its own: the logits stay float).
  ModulePtr m2 = make_model("alexnet_bn", 10, 0);
  q.overrides["classifier.6"] = {8, 8};
  const PrepareReport r2 = prepare(*m2, testing::test_backend("default"), q);
  REQUIRE(r2.layers[r2.layers.size() - 2].name == "classifier.4");
  REQUIRE(r2.layers[r2.layers.size() - 2].output->bits == 8);
  REQUIRE(r2.layers[r2.layers.size() - 3].output->bits == 4);
}

TEST_CASE("the power_of_two backend yields only power-of-two scales", "[quant][prepare]") {
  Backend b = testing::test_backend("power_of_two");
  b.weight.symmetric = true;
  b.weight.formula = ScaleFormula::power_of_two;
  b.activation.is_signed = true;
  b.activation.symmetric = true;
  b.activation.formula = ScaleFormula::power_of_two;
  b.min_scale = 1.f / 4096;
  ModulePtr m = make_model("small_cnn", 4, 0);
  prepare(*m, b, QConfig{});
  m->train();
  Generator g(4);
  for (int i = 0; i < 3; ++i) m->forward(Tensor::randn({4, 3, 8, 8}, g));
  int checked = 0;
  for (FakeQuantizer* q : fake_quantizers(*m)) {
    REQUIRE(q->config().spec.formula == ScaleFormula::power_of_two);
    for (float s : q->qparams().scale.to_vector()) {
      int e;
      REQUIRE(std::frexp(s, &e) == 0.5f);  // an exact power of two
      REQUIRE(s >= 1.f / 4096);
      ++checked;
    }
    for (float z : q->qparams().zero_point.to(DType::f32).to_vector()) REQUIRE(z == 0.f);
  }
  REQUIRE(checked > 10);
}

TEST_CASE("with power-of-two scales the network input keeps its negative half", "[quant][prepare]") {
  QConfig q;
  q.formula = ScaleFormula::power_of_two;
  ModulePtr m = make_model("small_cnn", 4, 0);
  const PrepareReport r = prepare(*m, testing::test_backend("default"), q);  // uint8 activations
  REQUIRE(r.layers[0].input.has_value());
  for (auto& [n, mod] : m->named_modules())
    if (n == "features.0.input_fake_quant") REQUIRE(dynamic_cast<FakeQuantizer*>(mod)->config().spec.is_signed);
  for (auto& [n, mod] : m->named_modules())
    if (n == "features.0.activation_post_process")
      REQUIRE_FALSE(dynamic_cast<FakeQuantizer*>(mod)->config().spec.is_signed);  // post-ReLU stays unsigned
}

TEST_CASE("prepare refuses an override that names no quantized layer", "[quant][prepare]") {
  ModulePtr m = make_model("alexnet_bn", 10, 0);
  QConfig q;
  q.overrides["features.99"] = LayerBits{8, 8};
  REQUIRE_THROWS_WITH(prepare(*m, testing::test_backend("default"), q),
                      Contains("quant.overrides.features.99: names no quantized layer") &&
                          Contains("features.0, features.4"));
  ModulePtr ok = make_model("alexnet_bn", 10, 0);
  q.overrides.clear();
  q.overrides["classifier.6"] = LayerBits{8, 8};
  REQUIRE_NOTHROW(prepare(*ok, testing::test_backend("default"), q));
}
