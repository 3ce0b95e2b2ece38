// prepare() on graph models (Note [prepare on graphs]): a chain written as a
// graph prepares to the same QAT model, bit for bit; ResNet's and
// MobileNetV2's patterns, where their quantizers go, what a backend lacking a
// pattern leaves float, and the refusals.
#include "tests/graph_checks.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "apps/model_file.h"
#include "core/ops.h"
#include "layers/graph.h"
#include "models/models.h"
#include "quant/sim/int8_training.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"

using Catch::Matchers::Contains;
using namespace qat;
using namespace qat::quant;
namespace fs = std::filesystem;

namespace {

Backend all_patterns() {
  Backend b = testing::test_backend("default");
  for (int p = 0; p < static_cast<int>(Pattern::concat) + 1; ++p) b.patterns.insert(static_cast<Pattern>(p));
  return b;
}

QConfig qconfig8() {
  QConfig q;
  q.weight_bits = q.activation_bits = 8;
  return q;
}

// small_cnn's layers as a model file, named as its children are.
const char* kSmallCnnGraph = R"(name: small_cnn_graph
nodes:
  - {name: features.0, op: conv2d, in: 3, out: 8, kernel: 3, padding: 1, bias: false}
  - {name: features.1, op: batch_norm, channels: 8}
  - {name: features.2, op: relu}
  - {name: features.3, op: max_pool, kernel: 2}
  - {name: features.4, op: conv2d, in: 8, out: 16, kernel: 3, padding: 1, bias: false}
  - {name: features.5, op: batch_norm, channels: 16}
  - {name: features.6, op: relu}
  - {name: features.7, op: adaptive_avg_pool}
  - {name: features.8, op: flatten}
  - {name: fc, op: linear, in: 16, out: $num_classes}
)";

const PreparedLayer& layer(const PrepareReport& r, const std::string& name) {
  for (const PreparedLayer& l : r.layers)
    if (l.name == name) return l;
  FAIL("no prepared layer " << name << " in\n" << r.to_string());
  return r.layers.front();
}

// small_cnn (5 classes, seed 3) and the same layers as a graph
// (kSmallCnnGraph, written into dir), both prepared W8A8 on the default backend.
struct ChainAndGraph {
  ModulePtr chain, graph;
  PrepareReport chain_report, graph_report;
};
ChainAndGraph prepared_chain_and_graph(const fs::path& dir) {
  std::ofstream(dir / "net.yaml") << kSmallCnnGraph;
  ChainAndGraph r{make_model("small_cnn", 5, 3), apps::load_model_file((dir / "net.yaml").string(), 5, 3), {}, {}};
  const Backend b = testing::test_backend("default");
  r.chain_report = prepare(*r.chain, b, qconfig8());
  r.graph_report = prepare(*r.graph, b, qconfig8());
  return r;
}

int count(const PrepareReport& r, const std::string& pattern) {
  int n = 0;
  for (const PreparedLayer& l : r.layers) n += l.pattern == pattern;
  for (const PreparedAdd& a : r.adds) n += a.pattern == pattern;
  return n;
}

}  // namespace

TEST_CASE("prepare: a chain written as a graph becomes the same QAT model, outputs and state bit for bit",
          "[quant][prepare][graph]") {
  const testing::TempDir t("qat_prepare_graph_");
  const ChainAndGraph p = prepared_chain_and_graph(t.dir);
  const ModulePtr &chain = p.chain, &graph = p.graph;
  CHECK(p.chain_report.to_string() == p.graph_report.to_string());
  Generator gen(9);
  for (int step = 0; step < 3; ++step) {  // training mode: observers and BN statistics move
    const Tensor x = Tensor::randn({4, 3, 12, 12}, gen);
    REQUIRE(chain->forward(x).to_vector() == graph->forward(x).to_vector());
  }
  chain->eval();
  graph->eval();
  const Tensor x = Tensor::randn({2, 3, 12, 12}, gen);
  CHECK(chain->forward(x).to_vector() == graph->forward(x).to_vector());
  testing::require_same_tensors(chain->state_dict(), graph->state_dict());
}

TEST_CASE("prepare: ResNet-20's patterns, its residual adds with ReLU quantized once, float logits",
          "[quant][prepare][graph]") {
  ModulePtr m = make_model("resnet20", 10, 1);
  auto& g = dynamic_cast<Graph&>(*m);
  const PrepareReport r = prepare(*m, testing::test_backend("default"), qconfig8());
  INFO(r.to_string());
  CHECK(r.layers.size() == 22);  // conv1, 18 block convs, 2 projections, fc
  CHECK(count(r, "conv+bn+relu") == 10);
  CHECK(count(r, "conv+bn") == 11);
  CHECK(count(r, "linear") == 1);
  CHECK(count(r, "add+relu") == 9);
  CHECK(r.float_layers.empty());
  CHECK(layer(r, "conv1").input.has_value());  // the network input
  CHECK_FALSE(layer(r, "layer1.0.conv1").input.has_value());
  CHECK_FALSE(layer(r, "fc").input.has_value());  // the pool rounds onto its input's grid
  CHECK_FALSE(layer(r, "fc").output.has_value());
  CHECK(layer(r, "layer2.0.downsample.0").output.has_value());
  CHECK(g.module("layer1.0.bn1")->type_name() == "Identity");
  CHECK(g.module("layer1.0.relu")->type_name() == "Identity");
  CHECK(g.module("layer1.0.conv1")->type_name() == "QatConvBnReLU2d");
  CHECK(g.module("layer1.0.relu_1")->type_name() == "Sequential");  // ReLU, then the add's quantizer
  CHECK(g.module("avgpool")->type_name() == "Sequential");          // pool, then the shared quantizer
  Generator gen(2);
  const Tensor y = m->forward(Tensor::randn({2, 3, 32, 32}, gen));
  CHECK(y.sizes() == Shape({2, 10}));
  for (FakeQuantizer* f : fake_quantizers(*m)) CHECK(f->config().spec.bits == 8);
}

TEST_CASE("prepare: MobileNetV2's conv+bn+relu6 and its adds without ReLU get a quantizer node after them",
          "[quant][prepare][graph]") {
  ModulePtr m = make_model("mobilenet_v2", 10, 1, ModelOptions{ResNetStem::small});
  auto& g = dynamic_cast<Graph&>(*m);
  const PrepareReport r = prepare(*m, testing::test_backend("default"), qconfig8());
  INFO(r.to_string());
  CHECK(count(r, "conv+bn+relu6") == 35);  // stem, 17 depthwise, 16 expansions, the last 1x1
  CHECK(count(r, "conv+bn") == 17);        // the projections
  CHECK(count(r, "add") == 10);
  CHECK(g.module("features.3.add_quant") != nullptr);
  const auto readers = g.readers("features.3.add");
  REQUIRE(readers.size() == 1);
  CHECK(readers[0] == "features.3.add_quant");
  CHECK(g.module("features.1.conv.0.0")->type_name() == "QatConvBnReLU62d");
  CHECK(dynamic_cast<QatConv2d*>(g.module("features.1.conv.0.0"))->params.groups == 32);
  Generator gen(4);
  CHECK(m->forward(Tensor::randn({2, 3, 32, 32}, gen)).sizes() == Shape({2, 10}));
}

TEST_CASE("prepare on graphs: what the backend lacks stays float and is named, and unknown overrides are refused",
          "[quant][prepare][graph]") {
  SECTION("no add pattern: the adds stay float, and the layers after them quantize their input") {
    Backend b = testing::test_backend("default");
    b.patterns.erase(Pattern::add);
    b.patterns.erase(Pattern::add_relu);
    ModulePtr m = make_model("resnet20", 10, 1);
    const PrepareReport r = prepare(*m, b, qconfig8());
    CHECK(r.adds.empty());
    CHECK(std::count(r.float_layers.begin(), r.float_layers.end(), "layer1.0.add (add)") == 1);
    CHECK(layer(r, "layer1.1.conv1").input.has_value());
  }
  SECTION("no conv+bn+relu6: conv+bn fused, the ReLU6 node kept") {
    Backend b = all_patterns();
    b.patterns.erase(Pattern::conv_bn_relu6);
    ModulePtr m = make_model("mobilenet_v2", 10, 1, ModelOptions{ResNetStem::small});
    const PrepareReport r = prepare(*m, b, qconfig8());
    CHECK(count(r, "conv+bn+relu6") == 0);
    CHECK(dynamic_cast<Graph&>(*m).module("features.0.2")->type_name() == "ReLU6");
  }
  SECTION("a concat") {
    const testing::TempDir t("qat_prepare_concat_");
    std::ofstream(t.dir / "cat.yaml") << R"(name: cat
nodes:
  - {name: a, op: conv2d, in: 3, out: 4, kernel: 1}
  - {name: b, op: conv2d, input: input, in: 3, out: 4, kernel: 1}
  - {name: cat, op: concat, inputs: [a, b]}
  - {name: pool, op: adaptive_avg_pool}
  - {name: flat, op: flatten}
  - {name: fc, op: linear, in: 8, out: 2}
)";
    ModulePtr m = apps::load_model_file((t.dir / "cat.yaml").string(), 2, 0);
    Backend b = testing::test_backend("default");
    b.patterns.erase(Pattern::concat);
    const PrepareReport r = prepare(*m, b, qconfig8());
    CHECK(std::count(r.float_layers.begin(), r.float_layers.end(), "cat (concat)") == 1);
    CHECK(layer(r, "fc").input.has_value());  // the layer after the float concat quantizes its input
    // with the pattern: one op, its quantizer on a node after it
    ModulePtr q = apps::load_model_file((t.dir / "cat.yaml").string(), 2, 0);
    const PrepareReport rq = prepare(*q, testing::test_backend("default"), qconfig8());
    CHECK(count(rq, "concat") == 1);
    CHECK(dynamic_cast<FakeQuantizer*>(dynamic_cast<Graph&>(*q).module("cat_quant")) != nullptr);
  }
  SECTION("an override naming no layer") {
    QConfig q = qconfig8();
    q.overrides["layer9.0.conv1"] = {4, 4};
    ModulePtr m = make_model("resnet20", 10, 1);
    REQUIRE_THROWS_WITH(prepare(*m, testing::test_backend("default"), q),
                        Contains("layer9.0.conv1") && Contains("names no quantized layer"));
  }
}

namespace {
// Losses and final parameters of 4 SGD steps of a prepared model in INT8
// training (Note [INT8 layer inputs]), and its INT8 layers' names.
struct Int8Run {
  std::vector<float> losses;
  TensorMap state;
  std::vector<std::string> layers;
};
Int8Run int8_steps(Module& m, int64_t res, int64_t classes) {
  Int8Run r;
  for (const Int8Layer& l : enable_int8_training(m, Int8GradConfig{}, {}, 11)) r.layers.push_back(l.name);
  Generator g(6);
  const Tensor x = Tensor::randn({8, 3, res, res}, g);
  std::vector<int32_t> labels;
  for (int i = 0; i < 8; ++i) labels.push_back(i % static_cast<int32_t>(classes));
  const Tensor y = Tensor::from_vector_i32(labels, {8});
  r.losses = testing::sgd_steps(m, x, y, 4, 0.05f);
  r.state = m.state_dict();
  return r;
}
}  // namespace

// INT8 training on graphs: each layer reads the grid of the quantizer found
// along its input edge. A chain written as a graph trains as the chain does.
TEST_CASE("INT8 training: a chain written as a graph trains as the chain, losses and state bit for bit",
          "[quant][int8train][graph]") {
  const testing::TempDir t("qat_int8_graph_");
  const ChainAndGraph p = prepared_chain_and_graph(t.dir);
  const Int8Run c = int8_steps(*p.chain, 12, 5), g = int8_steps(*p.graph, 12, 5);
  CHECK(g.layers == std::vector<std::string>{"features.0", "features.4", "fc"});
  CHECK(c.layers == g.layers);
  REQUIRE(c.losses == g.losses);
  testing::require_same_tensors(c.state, g.state);
}

// ResNet-20: the layers after a residual add read the add's quantizer (on
// the ReLU node after it), the projections the block's input; each INT8 op
// checks that every input value lies on the grid it was given, so a wrong
// source stops the step naming the layer.
TEST_CASE("INT8 training of ResNet-20: every conv and the classifier on integers, each reading its edge's grid",
          "[quant][int8train][graph]") {
  ModulePtr m = make_model("resnet20", 10, 1);
  prepare(*m, testing::test_backend("default"), qconfig8());
  const Int8Run r = int8_steps(*m, 16, 10);
  CHECK(r.layers.size() == 22);
  for (const float l : r.losses) CHECK(std::isfinite(l));
  SECTION("the integer forward runs every layer on integers too") {
    ModulePtr f = make_model("resnet20", 10, 1);
    prepare(*f, testing::test_backend("default"), qconfig8());
    const std::vector<IntegerForwardLayer> layers = enable_integer_forward(*f);
    CHECK(layers.size() == 22);
    for (const IntegerForwardLayer& l : layers) CHECK(l.float_because.empty());
    Generator gen(3);
    f->train();
    CHECK(f->forward(Tensor::randn({4, 3, 16, 16}, gen)).sizes() == Shape({4, 10}));
  }
}

// Its 17 depthwise layers on their direct integer kernels (Note [INT8
// training of depthwise layers]), the adds' quantizer nodes read by the
// layers after them.
TEST_CASE("INT8 training of MobileNetV2: every conv, depthwise ones included, and the classifier on integers",
          "[quant][int8train][graph]") {
  ModulePtr m = make_model("mobilenet_v2", 10, 1, ModelOptions{ResNetStem::small});
  prepare(*m, testing::test_backend("default"), qconfig8());
  const Int8Run r = int8_steps(*m, 16, 10);
  CHECK(r.layers.size() == 53);  // 35 conv+bn+relu6 (17 depthwise), 17 projections, the classifier
  for (const float l : r.losses) CHECK(std::isfinite(l));
  ModulePtr f = make_model("mobilenet_v2", 10, 1, ModelOptions{ResNetStem::small});
  prepare(*f, testing::test_backend("default"), qconfig8());
  const std::vector<IntegerForwardLayer> layers = enable_integer_forward(*f);
  CHECK(layers.size() == 53);
  for (const IntegerForwardLayer& l : layers) CHECK(l.float_because.empty());
}
