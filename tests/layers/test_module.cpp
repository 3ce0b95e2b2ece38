// Module bookkeeping: names, state dicts, train/eval, init bounds.
#include "tests/test_util.h"

#include "layers/layers.h"
#include "models/models.h"

using namespace qat;
using Catch::Matchers::Contains;

TEST_CASE("state_dict uses torchvision names for AlexNet-BN", "[module]") {
  ModulePtr m = make_model("alexnet_bn", 10, 0);
  TensorMap sd = m->state_dict();
  REQUIRE(sd.count("features.0.weight"));
  REQUIRE_FALSE(sd.count("features.0.bias"));  // convs before BN have no bias
  REQUIRE(sd.at("features.0.weight").sizes() == Shape{64, 3, 11, 11});
  REQUIRE(sd.at("features.1.running_var").sizes() == Shape{64});
  REQUIRE(sd.at("classifier.1.weight").sizes() == Shape{4096, 9216});
  REQUIRE(sd.at("classifier.6.bias").sizes() == Shape{10});
  REQUIRE(m->named_parameters().size() == 5 * 3 + 3 * 2);
  ModulePtr plain = make_model("alexnet", 1000, 0);
  REQUIRE(plain->num_parameters() == 61100840);  // torchvision's alexnet
}

TEST_CASE("load_state_dict copies values and reports every bad key", "[module]") {
  ModulePtr a = make_model("small_cnn", 4, 1), b = make_model("small_cnn", 4, 2);
  b->load_state_dict(a->state_dict());
  for (auto& [name, t] : a->state_dict()) REQUIRE(b->state_dict().at(name).to_vector() == t.to_vector());

  TensorMap bad = a->state_dict();
  bad.erase("fc.bias");
  bad["extra.weight"] = Tensor::zeros({1});
  bad["fc.weight"] = Tensor::zeros({3, 16});
  REQUIRE_THROWS_WITH(b->load_state_dict(bad), Contains("missing keys: fc.bias") &&
                                                  Contains("unexpected keys: extra.weight") &&
                                                  Contains("fc.weight (expected [4, 16]"));
  // non-strict still refuses a shape mismatch
  REQUIRE_THROWS_WITH(b->load_state_dict(bad, false), Contains("fc.weight"));
}

TEST_CASE("train/eval propagates, BN uses running stats in eval", "[module]") {
  auto bn = std::make_shared<BatchNorm2d>(2);
  Sequential seq({bn, std::make_shared<ReLU>()});
  seq.eval();
  REQUIRE_FALSE(bn->is_training());
  Generator g(3);
  Tensor x = Tensor::randn({2, 2, 3, 3}, g);
  Tensor y = seq.forward(x);  // eval with mean 0 var 1: y = relu(x / sqrt(1 + eps))
  for (int64_t i = 0; i < x.numel(); ++i)
    REQUIRE(y.to_vector()[i] == Approx(std::max(0.f, x.to_vector()[i] / std::sqrt(1.f + 1e-5f))));
  REQUIRE(bn->running_mean.to_vector() == std::vector<float>{0.f, 0.f});
  seq.train();
  seq.forward(x);
  REQUIRE(bn->running_mean.to_vector() != std::vector<float>{0.f, 0.f});
}

TEST_CASE("conv and linear init follow PyTorch's bounds", "[module]") {
  Generator g(5);
  Conv2d conv({16, 32, 3, 1, 1, 1, 1, true}, g);
  const float bound = 1.f / std::sqrt(16.f * 9.f);
  float lo = 1, hi = -1;
  for (float v : conv.weight.to_vector()) lo = std::min(lo, v), hi = std::max(hi, v);
  REQUIRE(lo >= -bound);
  REQUIRE(hi <= bound);
  REQUIRE(hi > 0.9f * bound);  // the whole range is used
  REQUIRE(lo < -0.9f * bound);
}

TEST_CASE("AlexNet accepts any input of at least 63 px and explains smaller ones", "[module]") {
  ModulePtr m = make_model("alexnet", 7, 0);
  m->eval();
  NoGradGuard ng;
  Generator g(1);
  for (int64_t s : {63, 100}) REQUIRE(m->forward(Tensor::randn({1, 3, s, s}, g)).sizes() == Shape{1, 7});
  REQUIRE_THROWS_WITH(m->forward(Tensor::randn({1, 3, 62, 62}, g)), Contains("H,W >= 63") &&
                                                                      Contains("[1, 3, 62, 62]"));
  REQUIRE_THROWS_WITH(make_model("resnet", 10), Contains("unknown model 'resnet'") && Contains("alexnet_bn"));
}

TEST_CASE("to_string prints the layer tree", "[module]") {
  ModulePtr m = make_model("alexnet_bn", 10, 0);
  const std::string s = m->to_string();
  REQUIRE_THAT(s, Contains("(features): Sequential") && Contains("(0): Conv2d(3->64, k=11, s=4, p=2, no bias)") &&
                      Contains("(6): Linear(4096->10)"));
}
