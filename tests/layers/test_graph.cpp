// Graph models (layers/graph.h, Note [graph model]): what a graph computes,
// its gradients, its refusals, and the ResNets built on it (models/resnet.h).
#include "tests/test_util.h"

#include "core/ops.h"
#include "layers/graph.h"
#include "layers/layers.h"
#include "models/models.h"
#include "models/resnet.h"
#include "optim/sgd.h"

using namespace qat;
using Catch::Matchers::Contains;
using V = std::vector<Tensor>;

namespace {

// x -> conv -> relu -> (+ x) -> concat with x: a residual add and a channel join.
std::shared_ptr<Graph> residual_concat(Generator& gen) {
  auto g = std::make_shared<Graph>();
  g->add("block.conv", std::make_shared<Conv2d>(Conv2dOptions{2, 2, 3, 1, 1}, gen), Graph::kInput);
  g->add("block.relu", std::make_shared<ReLU>(), "block.conv");
  g->add_op("block.add", GraphOp::add, {"block.relu", Graph::kInput});
  g->add_op("join", GraphOp::concat, {"block.add", Graph::kInput});
  g->set_output("join");
  return g;
}

int64_t count(const Module& m) { return m.num_parameters(); }

}  // namespace

TEST_CASE("a graph computes its nodes' functions, in any order they were added", "[graph]") {
  Generator gen(3);
  auto g = residual_concat(gen);
  Tensor x = testing::rand_tensor({2, 2, 5, 5}, 1, false);
  auto* conv = dynamic_cast<Conv2d*>(g->named_modules()[2].second);
  REQUIRE(conv != nullptr);
  const Tensor expected = concat({add(relu(conv->forward(x)), x), x}, 1);
  REQUIRE(testing::same_bits(g->forward(x), expected));
  // Parameters named by the node's path, through containers.
  const TensorMap sd = g->state_dict();
  CHECK(sd.count("block.conv.weight") == 1);
  CHECK(sd.count("block.conv.bias") == 1);
  CHECK(sd.size() == 2);

  // The same nodes listed readers first: sorted before running.
  Generator gen2(3);
  auto h = std::make_shared<Graph>();
  h->add_op("join", GraphOp::concat, {"block.add", Graph::kInput});
  h->add_op("block.add", GraphOp::add, {"block.relu", Graph::kInput});
  h->add("block.relu", std::make_shared<ReLU>(), "block.conv");
  h->add("block.conv", std::make_shared<Conv2d>(Conv2dOptions{2, 2, 3, 1, 1}, gen2), Graph::kInput);
  h->set_output("join");
  REQUIRE(testing::same_bits(h->forward(x), expected));
}

TEST_CASE("gradcheck: through a graph's residual add and concat", "[graph][gradcheck]") {
  Generator gen(5);
  auto g = residual_concat(gen);
  testing::gradcheck([&](const V& v) { return g->forward(v[0]); }, {testing::distinct_tensor({2, 2, 4, 4}, 2)});
  // And a torchvision basic block with its downsample, BN in training mode,
  // with respect to the input and to the first convolution's weight.
  auto b = std::make_shared<Graph>();
  Generator gen2(6);
  b->set_output(basic_block(*b, "layer1.0", Graph::kInput, 2, 3, 2, gen2));
  auto* w = &dynamic_cast<Conv2d&>(*b->named_modules()[3].second).weight;
  REQUIRE(b->state_dict().count("layer1.0.downsample.0.weight") == 1);
  const Tensor w0 = w->detach();
  // A smaller step: the weight moves every ReLU input of the block at once,
  // and a step of 1e-2 carries some across the kink.
  testing::GradCheckOptions opt;
  opt.eps = 1e-3;
  testing::gradcheck(
      [&](const V& v) {
        *w = v[1];
        return b->forward(v[0]);
      },
      {testing::rand_tensor({3, 2, 5, 5}, 3), w0.clone().set_requires_grad(true)}, opt);
}

TEST_CASE("a graph refuses a cycle, a dangling input, a name given twice, naming the node", "[graph]") {
  Generator gen(1);
  SECTION("a cycle") {
    Graph g;
    g.add("a", std::make_shared<ReLU>(), "c");
    g.add("b", std::make_shared<ReLU>(), "a");
    g.add("c", std::make_shared<ReLU>(), "b");
    g.set_output("c");
    REQUIRE_THROWS_WITH(g.check(), Contains("graph: a cycle: a -> c -> b -> a"));
  }
  SECTION("an input that is no node") {
    Graph g;
    g.add("a", std::make_shared<ReLU>(), Graph::kInput);
    g.add_op("sum", GraphOp::add, {"a", "b"});
    g.set_output("sum");
    REQUIRE_THROWS_WITH(g.check(), Contains("node 'sum' reads 'b', which is neither a node nor 'input'"));
  }
  SECTION("a name twice, a node under a module, an add of one input, no output") {
    Graph g;
    g.add("a", std::make_shared<ReLU>(), Graph::kInput);
    REQUIRE_THROWS_WITH(g.add("a", std::make_shared<ReLU>(), "a"), Contains("node 'a' is defined twice"));
    REQUIRE_THROWS_WITH(g.add("a.b", std::make_shared<ReLU>(), "a"),
                        Contains("node 'a.b' lies under 'a', which is a node's module (ReLU)"));
    REQUIRE_THROWS_WITH(g.add_op("s", GraphOp::add, {"a"}), Contains("node 's' (add) takes two inputs, got 1 (a)"));
    REQUIRE_THROWS_WITH(g.check(), Contains("no output node"));
    g.set_output("x");
    REQUIRE_THROWS_WITH(g.check(), Contains("the output 'x' is not a node"));
  }
  SECTION("shapes that do not fit, at the node") {
    Graph g;
    g.add("conv", std::make_shared<Conv2d>(Conv2dOptions{2, 4, 3, 2, 1}, gen), Graph::kInput);
    g.add_op("sum", GraphOp::add, {"conv", Graph::kInput});
    g.set_output("sum");
    REQUIRE_THROWS_WITH(g.forward(Tensor::zeros({1, 2, 8, 8})),
                        Contains("node 'sum' adds conv [1, 4, 4, 4] and input [1, 2, 8, 8]: the shapes differ"));
  }
}

TEST_CASE("resnet18 has torchvision's parameters: 11,689,512 for 1000 classes, by torchvision's names",
          "[graph][models]") {
  ModulePtr m = make_model("resnet18", 1000, 0);
  CHECK(count(*m) == 11689512);  // torchvision.models.resnet18().parameters(), summed
  const TensorMap sd = m->state_dict();
  for (const char* k : {"conv1.weight", "bn1.running_var", "layer1.0.conv1.weight", "layer1.1.bn2.bias",
                        "layer2.0.downsample.0.weight", "layer2.0.downsample.1.running_mean", "layer4.1.conv2.weight",
                        "fc.weight", "fc.bias"})
    CHECK(sd.count(k) == 1);
  CHECK(sd.count("layer1.0.downsample.0.weight") == 0);  // same shape in layer1: identity shortcut
  CHECK(sd.at("conv1.weight").sizes() == Shape{64, 3, 7, 7});
  // 62 parameter tensors and the running mean and variance of 20 BNs:
  // torchvision's 122 state-dict entries less its 20 num_batches_tracked.
  CHECK(sd.size() == 62 + 40);
  NoGradGuard ng;
  m->eval();
  CHECK(m->forward(Tensor::zeros({2, 3, 128, 128})).sizes() == Shape{2, 1000});
}

TEST_CASE("resnet20: He et al.'s 3 stages of 3 blocks at 16/32/64 channels, its shapes and a training step",
          "[graph][models]") {
  ModulePtr m = make_model("resnet20", 10, 1);
  // conv1 + 9 blocks of two 3x3 convolutions, two 1x1 shortcuts, BN after each, fc.
  int64_t expected = 3 * 16 * 9 + 2 * 16;
  int64_t in = 16;
  for (const int64_t w : {16, 32, 64})
    for (int b = 0; b < 3; ++b) {
      expected += in * w * 9 + 2 * w + w * w * 9 + 2 * w;
      if (in != w) expected += in * w + 2 * w;
      in = w;
    }
  expected += 64 * 10 + 10;
  CHECK(count(*m) == expected);
  // 269,722 with the paper's option A shortcuts (zero padding, no parameters),
  // as the common PyTorch ResNet-20 reports; option B adds two 1x1 convs and their BN.
  CHECK(expected == 269722 + (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64));
  Tensor x = testing::rand_tensor({8, 3, 32, 32}, 4, false);
  const Tensor y = Tensor::from_vector_i32({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  SGD opt({ParamGroup{"all", m->parameters(), 0.05}}, SGDOptions{0.9});
  float first = 0, last = 0;
  for (int s = 0; s < 6; ++s) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m->forward(x), y);
    (s == 0 ? first : last) = loss.item();
    loss.backward();
    opt.step();
  }
  CHECK(last < 0.5f * first);  // six steps on one batch: it memorises
  // A checkpoint's state loads into a fresh model, which then computes the same.
  ModulePtr fresh = make_model("resnet20", 10, 99);
  fresh->load_state_dict(m->state_dict());
  NoGradGuard ng;
  m->eval(), fresh->eval();
  REQUIRE(testing::same_bits(fresh->forward(x), m->forward(x)));
}

TEST_CASE("mobilenet_v2 has torchvision's parameters: 3,504,872 for 1000 classes, by torchvision's names",
          "[graph][models]") {
  ModulePtr m = make_model("mobilenet_v2", 1000, 0);
  CHECK(count(*m) == 3504872);  // torchvision.models.mobilenet_v2().parameters(), summed
  const TensorMap sd = m->state_dict();
  CHECK(sd.size() == 262);  // torchvision's state dict without its num_batches_tracked
  CHECK(sd.at("features.2.conv.1.0.weight").sizes() == Shape{96, 1, 3, 3});  // depthwise
  for (const char* k : {"features.0.0.weight", "features.1.conv.0.0.weight", "features.1.conv.1.weight",
                        "features.17.conv.3.running_var", "features.18.0.weight", "classifier.1.bias"})
    CHECK(sd.count(k) == 1);
  NoGradGuard ng;
  m->eval();
  CHECK(m->forward(Tensor::zeros({1, 3, 128, 128})).sizes() == Shape{1, 1000});
  // The small stem halves a 32 px input three times: a 4 x 4 map before the pooling.
  ModulePtr s = make_model("mobilenet_v2", 10, 0, ModelOptions{ResNetStem::small});
  s->eval();
  auto* g = dynamic_cast<Graph*>(s.get());
  REQUIRE(g != nullptr);
  g->set_output("features.18.2");
  CHECK(g->forward(Tensor::zeros({1, 3, 32, 32})).sizes() == Shape{1, 1280, 4, 4});
}

TEST_CASE("resnet18 with the small stem: conv 3x3 stride 1, no max pool, PyTorch's 11,173,962 parameters at 10 classes",
          "[graph][models]") {
  ModulePtr m = make_model("resnet18", 10, 0, ModelOptions{ResNetStem::small});
  CHECK(count(*m) == 11173962);  // torchvision's resnet18(num_classes=10) with conv1 3x3 and no max pool
  CHECK(m->state_dict().at("conv1.weight").sizes() == Shape{64, 3, 3, 3});
  NoGradGuard ng;
  m->eval();
  CHECK(m->forward(Tensor::zeros({2, 3, 32, 32})).sizes() == Shape{2, 10});
}
