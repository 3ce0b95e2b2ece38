// Model files (apps/model_file.h, Note [model file]): the shipped files of
// the three built-in graph models build the same networks as the built-ins
// (names, shapes, weights for one seed, outputs and gradients), and every
// refusal names the file, the line and the node; model.file in a config.
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps/config.h"
#include "apps/model_file.h"
#include "core/error.h"
#include "core/ops.h"
#include "models/models.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace qat;
using namespace qat::apps;

namespace {

std::string shipped(const std::string& name) {
  return (fs::path(QAT_SOURCE_DIR) / "configs" / "models" / (name + ".yaml")).string();
}

// Same names, shapes and values; then the same outputs and input gradients
// for one batch in training mode (BN's batch statistics, dropout's mask).
void require_same_network(Module& built_in, Module& from_file, int64_t image_size) {
  const TensorMap a = built_in.state_dict(), b = from_file.state_dict();
  REQUIRE(a.size() == b.size());
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    INFO(ia->first);
    REQUIRE(ia->first == ib->first);
    REQUIRE(ia->second.sizes() == ib->second.sizes());
    REQUIRE(ia->second.to_vector() == ib->second.to_vector());
  }
  Generator g(5);
  const Tensor x = Tensor::randn({2, 3, image_size, image_size}, g);
  Tensor xa = x.clone().set_requires_grad(true), xb = x.clone().set_requires_grad(true);
  Tensor ya = built_in.forward(xa), yb = from_file.forward(xb);
  REQUIRE(ya.to_vector() == yb.to_vector());
  const Tensor gy = Tensor::randn(ya.sizes(), g);
  ya.backward(gy);
  yb.backward(gy);
  CHECK(xa.grad().to_vector() == xb.grad().to_vector());
}

struct TempFiles : qat::testing::TempDir {
  TempFiles() : qat::testing::TempDir("qat_model_file_test_") {}
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = dir / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

// A small residual + depthwise network, line numbers in the comments.
const char* kSmall = R"(name: tiny
blocks:
  res:
    params: [c]
    nodes:
      - {name: dw, op: conv2d, in: $c, out: $c, kernel: 3, padding: 1, groups: $c}
      - {name: bn, op: batch_norm, channels: $c}
      - {name: add, op: add, inputs: [bn, input]}
nodes:
  - {name: stem, op: conv2d, in: 3, out: 8, kernel: 3, padding: 1}
  - {name: "blocks.{i}", block: res, repeat: 2, args: {c: 8}}
  - {name: cat, op: concat, inputs: [stem, blocks.1]}
  - {name: pool, op: adaptive_avg_pool}
  - {name: flat, op: flatten}
  - {name: fc, op: linear, in: 16, out: $num_classes}
)";

// kSmall with line `line` (1-based) replaced by `text`.
std::string small_with(int line, const std::string& text) {
  std::string s = kSmall, out;
  size_t start = 0;
  for (int l = 1; start <= s.size(); ++l) {
    const size_t end = s.find('\n', start);
    const std::string row = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    out += (l == line ? text : row) + "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string load_error(const std::string& path, int64_t image_size = 0) {
  try {
    ModelConfig m;
    m.file = path;
    m.num_classes = 10;
    if (image_size) dry_run_model(m, image_size);
    else load_model_file(path, 10, 0);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the shipped model files build the built-in networks: names, shapes, weights, outputs and gradients",
          "[model_file]") {
  for (const char* name : {"resnet20", "resnet18", "mobilenet_v2"}) {
    DYNAMIC_SECTION(name) {
      ModulePtr built_in = make_model(name, 10, 3);
      ModulePtr from_file = load_model_file(shipped(name), 10, 3);
      require_same_network(*built_in, *from_file, std::string(name) == "resnet20" ? 32 : 64);
      CHECK(model_file_name(shipped(name)) == name);
    }
  }
}

TEST_CASE("a model file: blocks, repeats, concat and depthwise convs, with $num_classes", "[model_file]") {
  TempFiles t;
  const std::shared_ptr<Graph> g = load_model_file(t.write("tiny.yaml", kSmall), 7, 0);
  const TensorMap s = g->state_dict();
  CHECK(s.count("blocks.0.dw.weight"));
  CHECK(s.count("blocks.1.bn.running_var"));
  CHECK(s.at("blocks.1.dw.weight").sizes() == Shape({8, 1, 3, 3}));
  CHECK(s.at("fc.weight").sizes() == Shape({7, 16}));
  Generator gen(1);
  CHECK(g->forward(Tensor::randn({2, 3, 6, 6}, gen)).sizes() == Shape({2, 7}));
}

TEST_CASE("a model file's refusals name the file, the line and the node", "[model_file]") {
  TempFiles t;
  struct Case {
    const char* what;
    int line;
    const char* text;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"unknown op", 10, "  - {name: stem, op: conv, in: 3, out: 8, kernel: 3}",
       {"line 10", "unknown op 'conv'", "conv2d"}},
      {"an input that is no node", 12, "  - {name: cat, op: concat, inputs: [stem, blocks.7]}",
       {"line 12", "no node 'blocks.7' above this one", "blocks.1"}},
      {"a cycle: a node reads one below it", 10, "  - {name: stem, op: conv2d, input: fc, in: 3, out: 8, kernel: 3}",
       {"line 10", "'fc' is defined below this node", "line 15", "no cycle"}},
      {"an unknown key", 13, "  - {name: pool, op: adaptive_avg_pool, sise: 2}",
       {"line 13", "unknown key 'nodes[3].sise'", "size"}},
      {"a block's missing param", 11, "  - {name: \"blocks.{i}\", block: res, repeat: 2, args: {}}",
       {"line 11", "missing required key", "c"}},
      {"an unknown $param", 6, "      - {name: dw, op: conv2d, in: $c, out: $d, kernel: 3, padding: 1, groups: $c}",
       {"line 6", "unknown parameter $d", "$c"}},
      {"a repeat without {i}", 11, "  - {name: blocks, block: res, repeat: 2, args: {c: 8}}",
       {"line 11", "needs {i} in its name"}},
      {"an unknown block", 11, "  - {name: \"blocks.{i}\", block: ress, repeat: 2, args: {c: 8}}",
       {"line 11", "no block 'ress'", "res"}},
      {"groups that do not divide", 6, "      - {name: dw, op: conv2d, in: $c, out: $c, kernel: 3, groups: 3}",
       {"line 6", "groups", "must divide in (8)"}},
      {"a name given twice", 13, "  - {name: stem, op: adaptive_avg_pool}", {"line 13", "'stem' is defined twice"}},
      {"a repeat too large", 11, "  - {name: \"blocks.{i}\", block: res, repeat: 100000000, args: {c: 8}}",
       {"line 11", "repeat", "must be in [1, 1024]"}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.what) {
      const std::string path = t.write("bad.yaml", small_with(c.line, c.text));
      const std::string error = load_error(path);
      INFO(error);
      CHECK_THAT(error, Contains(path));
      for (const std::string& s : c.says) CHECK_THAT(error, Contains(s));
    }
  }
  SECTION("repeats of blocks of repeats that would build more than 20,000 nodes") {
    const std::string path = t.write("big.yaml", R"(name: big
blocks:
  inner:
    nodes:
      - {name: "r{i}", op: relu, repeat: 1000}
  outer:
    nodes:
      - {name: "b{i}", block: inner, repeat: 1000}
nodes:
  - {name: top, block: outer}
)");
    const std::string error = load_error(path);
    INFO(error);
    CHECK_THAT(error, Contains("line 5") && Contains("more than 20000 nodes"));
  }
  SECTION("shapes that do not fit fail the dry run, naming the node and its line") {
    const std::string path = t.write("bad.yaml", small_with(15, "  - {name: fc, op: linear, in: 8, out: $num_classes}"));
    CHECK(load_error(path) == "(no error)");  // builds: only running it shows the shapes
    const std::string error = load_error(path, 32);
    INFO(error);
    CHECK_THAT(error, Contains("does not run on 32x32 images") && Contains("graph node 'fc'") &&
                          Contains("line 15") && Contains("linear"));
  }
}

TEST_CASE("model.file in a config: relative to the config, the name from the file, a dry run at data.image_size",
          "[model_file][config]") {
  TempFiles t;
  fs::create_directories(t.dir / "train");
  fs::create_directories(t.dir / "val");
  t.write("models/tiny.yaml", kSmall);
  const std::string rest = "  num_classes: 4\ndata:\n  train: train\n  val: val\n  image_size: 32\n  resize: 32\n"
                           "train:\n  epochs: 1\noutput:\n  dir: runs/x\n";
  SECTION("read, and written back into the resolved config") {
    const ExperimentConfig cfg = load_config(t.write("c.yaml", "model:\n  file: models/tiny.yaml\n" + rest));
    CHECK(cfg.model.name == "tiny");
    CHECK(cfg.model.file == (t.dir / "models" / "tiny.yaml").string());
    CHECK(cfg.model.is_graph());
    const std::string yaml = config_to_yaml(cfg);
    CHECK_THAT(yaml, Contains("file: \"" + cfg.model.file + "\""));
    CHECK_THAT(yaml, !Contains("name: tiny"));
    const ExperimentConfig again = load_config(t.write("resolved.yaml", yaml));
    CHECK(config_hash(again) == config_hash(cfg));
    CHECK(make_configured_model(cfg.model, 0)->state_dict().at("fc.weight").sizes() == Shape({4, 16}));
  }
  SECTION("model.name and model.file together, and neither, are refused") {
    const std::string both = t.write("c.yaml", "model:\n  name: resnet20\n  file: models/tiny.yaml\n" + rest);
    REQUIRE_THROWS_WITH(load_config(both), Contains("line 3") && Contains("model.file:") && Contains("not model.name too"));
    const std::string neither = t.write("c.yaml", "model:\n" + rest);
    REQUIRE_THROWS_WITH(load_config(neither), Contains("missing required key 'model.name'") &&
                                                  Contains("model.file") && Contains("model.onnx"));
  }
  SECTION("a missing file and a stem are refused at their keys; a model file's integer forward is taken") {
    REQUIRE_THROWS_WITH(load_config(t.write("c.yaml", "model:\n  file: models/nope.yaml\n" + rest)),
                        Contains("line 2") && Contains("no such model file"));
    REQUIRE_THROWS_WITH(load_config(t.write("c.yaml", "model:\n  file: models/tiny.yaml\n  stem: small\n" + rest)),
                        Contains("model.stem") && Contains("does not apply to a model file"));
    CHECK(load_config(t.write("c.yaml", "model:\n  file: models/tiny.yaml\n" + rest +
                                            "quant:\n  enabled: true\n  integer_forward: true\n"))
              .quant.integer_forward);
  }
  SECTION("the dry run at data.image_size names the node that does not fit") {
    t.write("models/tiny.yaml", small_with(15, "  - {name: fc, op: linear, in: 8, out: $num_classes}"));
    REQUIRE_THROWS_WITH(load_config(t.write("c.yaml", "model:\n  file: models/tiny.yaml\n" + rest)),
                        Contains("32x32") && Contains("graph node 'fc'") && Contains("line 15"));
  }
}
