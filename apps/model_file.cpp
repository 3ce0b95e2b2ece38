#include "apps/model_file.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "apps/config.h"
#include "apps/onnx_import.h"
#include "apps/yaml_value.h"
#include "core/autograd.h"
#include "core/error.h"
#include "layers/layers.h"

namespace qat::apps {

namespace {

// The values of a block instance's params (or, at the top level,
// num_classes), each with where it was given.
using Args = std::map<std::string, YamlValue>;

constexpr int64_t kMaxRepeat = 1024;
constexpr size_t kMaxNodes = 20000;  // ResNet-152 has about 500; a check per added node scans the list

const std::vector<std::string> kCommonKeys = {"name", "input", "inputs"};
const std::map<std::string, std::vector<std::string>> kOpKeys = {
    {"conv2d", {"in", "out", "kernel", "stride", "padding", "dilation", "groups", "bias"}},
    {"linear", {"in", "out", "bias"}},
    {"batch_norm", {"channels", "eps", "momentum"}},
    {"relu", {}},
    {"relu6", {}},
    {"hardswish", {}},
    {"flatten", {}},
    {"identity", {}},
    {"dropout", {"p"}},
    {"max_pool", {"kernel", "stride", "padding"}},
    {"adaptive_avg_pool", {"size"}},
    {"add", {}},
    {"concat", {}},
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Where one scope's names lead: the top level, or one block instance.
struct Scope {
  std::string prefix;  // "" or "layer1.0."
  std::string input;   // the graph name its "input" stands for
  const Args* args;
  std::map<std::string, std::string> defined;  // local name -> graph name, nodes above
  std::map<std::string, std::string> below;    // local name -> where it is defined, every node of the list
};

class Builder {
 public:
  Builder(std::string file, const YamlValue& root, int64_t num_classes, uint64_t seed)
      : file_(std::move(file)), root_(root), gen_(seed), dropout_gen_(std::make_shared<Generator>(seed ^ 0x5eedd20f0f5eedULL)) {
    // (parsed, so that it is a plain scalar as if written in the file)
    const YAML::Node n = YAML::Load(std::to_string(num_classes));
    top_args_.emplace("num_classes", YamlValue(n, file_, "$num_classes", -1).given_by("model.num_classes"));
  }

  std::shared_ptr<Graph> build() {
    root_.only_keys({"name", "blocks", "nodes", "output"}, "a model file");
    (void)root_.get("name").as<std::string>();
    if (auto b = root_.find("blocks"))
      for (const auto& [name, block] : b->entries()) blocks_.emplace(name, block);
    Scope top{"", Graph::kInput, &top_args_, {}, {}};
    const std::string last = add_list(root_.get("nodes"), top);
    graph_->set_output(root_.find("output") ? lookup(*root_.find("output"), top) : last);
    try {
      graph_->check();
    } catch (const Error& e) {
      root_.fail(e.what());
    }
    return graph_;
  }

 private:
  // The nodes of `list` in `scope`; returns the graph name of the last.
  std::string add_list(const YamlValue& list, Scope& scope) {
    const std::vector<YamlValue> nodes = list.items("a list of nodes");
    if (nodes.empty()) list.fail("expected at least one node");
    for (const YamlValue& n : nodes)
      for (const std::string& name : instance_names(n)) scope.below.emplace(name, n.where());
    std::string previous = scope.input;
    for (const YamlValue& n : nodes) previous = add_entry(n, scope, previous);
    return previous;
  }

  // The local names an entry defines: one, or one per repeat.
  std::vector<std::string> instance_names(const YamlValue& n) const {
    const YamlValue name = n.get("name");
    const std::string pattern = name.as<std::string>();
    const int64_t repeat = n.find("repeat") ? n.get("repeat").as<int64_t>() : 1;
    const int64_t from = n.find("from") ? n.get("from").as<int64_t>() : 0;
    if (repeat < 1 || repeat > kMaxRepeat)
      n.get("repeat").fail("must be in [1, " + std::to_string(kMaxRepeat) + "], got " + std::to_string(repeat));
    if (from < 0) n.get("from").fail("must be >= 0, got " + std::to_string(from));
    const size_t at = pattern.find("{i}");
    if (repeat > 1 && at == std::string::npos)
      name.fail("a node repeated " + std::to_string(repeat) + " times needs {i} in its name (\"layer1.{i}\")");
    std::vector<std::string> names;
    for (int64_t i = 0; i < repeat; ++i) {
      std::string s = pattern;
      if (at != std::string::npos) s.replace(at, 3, std::to_string(from + i));
      names.push_back(s);
    }
    return names;
  }

  std::string add_entry(const YamlValue& n, Scope& scope, std::string previous) {
    if (!n.is_map()) n.fail("expected a node (a mapping with name and op or block), got " + n.describe());
    const bool is_block = n.find("block").has_value();
    if (is_block == n.find("op").has_value()) n.fail("a node has either op: or block:, and not both");
    for (const std::string& local : instance_names(n)) {
      const std::string full = scope.prefix + local;
      previous = is_block ? add_instance(n, scope, full, previous) : add_op(n, scope, full, previous);
      scope.defined[local] = previous;
    }
    return previous;
  }

  // A node's inputs as graph names: input:, inputs:, or the node above.
  std::vector<std::string> inputs_of(const YamlValue& n, Scope& scope, const std::string& previous) {
    if (n.find("input") && n.find("inputs")) n.fail("give input: (one) or inputs: (a list), not both");
    if (auto in = n.find("input")) return {lookup(*in, scope)};
    if (auto ins = n.find("inputs")) {
      std::vector<std::string> out;
      for (const YamlValue& v : ins->items("a list of node names")) out.push_back(lookup(v, scope));
      return out;
    }
    return {previous};
  }

  // A name a node reads, as its graph name.
  std::string lookup(const YamlValue& v, const Scope& scope) const {
    const std::string local = v.as<std::string>();
    if (local == Graph::kInput) return scope.input;
    if (auto it = scope.defined.find(local); it != scope.defined.end()) return it->second;
    if (auto it = scope.below.find(local); it != scope.below.end())
      v.fail("'" + local + "' is defined below this node (" + it->second +
             "): a node reads only nodes above it, so that the graph has no cycle");
    std::vector<std::string> known = {Graph::kInput};
    for (const auto& [name, full] : scope.defined) known.push_back(name);
    v.fail("no node '" + local + "' above this one (known here: " + join(known) + ")");
  }

  std::string add_op(const YamlValue& n, Scope& scope, const std::string& full, const std::string& previous) {
    // (repeats of blocks of repeats multiply: a crafted file must not build for ever)
    if (graph_->nodes().size() >= kMaxNodes)
      n.fail("the network would have more than " + std::to_string(kMaxNodes) + " nodes");
    const YamlValue opv = n.get("op");
    const std::string op = opv.as<std::string>();
    const auto keys = kOpKeys.find(op);
    if (keys == kOpKeys.end()) {
      std::vector<std::string> ops;
      for (const auto& [name, k] : kOpKeys) ops.push_back(name);
      opv.fail("unknown op '" + op + "' (known: " + join(ops) + ")");
    }
    std::vector<std::string> known = kCommonKeys;
    known.insert(known.end(), {"op", "repeat", "from"});
    known.insert(known.end(), keys->second.begin(), keys->second.end());
    n.only_keys(known, "op " + op);
    const std::vector<std::string> inputs = inputs_of(n, scope, previous);
    try {
      if (op == "add" || op == "concat") {
        if (!n.find("inputs")) n.fail("op " + op + " needs inputs: (a list of the nodes it joins)");
        graph_->add_op(full, op == "add" ? GraphOp::add : GraphOp::concat, inputs);
      } else {
        if (inputs.size() != 1) n.get("inputs").fail("op " + op + " reads one input; give input:");
        graph_->add(full, make_module(op, n, *scope.args), inputs[0]);
      }
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.rfind(file_, 0) == 0) throw;  // already names the file and a line
      n.fail("node '" + full + "': " + what);
    }
    graph_->set_origin(full, n.where());
    return full;
  }

  std::string add_instance(const YamlValue& n, Scope& scope, const std::string& full, const std::string& previous) {
    n.only_keys({"name", "block", "args", "input", "repeat", "from"}, "a block instance");
    const YamlValue bv = n.get("block");
    const std::string name = bv.as<std::string>();
    const auto it = blocks_.find(name);
    if (it == blocks_.end()) {
      std::vector<std::string> names;
      for (const auto& [b, v] : blocks_) names.push_back(b);
      bv.fail("no block '" + name + "' (blocks: " + (names.empty() ? "none" : join(names)) + ")");
    }
    if (std::find(open_.begin(), open_.end(), name) != open_.end())
      bv.fail("block '" + name + "' uses itself (through " + join(open_) + ")");
    const YamlValue& block = it->second;
    block.only_keys({"params", "nodes", "output"}, "a block");
    const Args args = instance_args(n, block, *scope.args);
    if (n.find("inputs")) n.get("inputs").fail("a block instance reads one input; give input:");
    Scope inner{full + ".", inputs_of(n, scope, previous)[0], &args, {}, {}};
    open_.push_back(name);
    const std::string last = add_list(block.get("nodes"), inner);
    open_.pop_back();
    return block.find("output") ? lookup(*block.find("output"), inner) : last;
  }

  // The instance's args: exactly the block's params, each "$x" of the outer
  // scope resolved.
  Args instance_args(const YamlValue& n, const YamlValue& block, const Args& outer) const {
    std::vector<std::string> params;
    if (auto p = block.find("params"))
      for (const YamlValue& v : p->items("a list of parameter names")) params.push_back(v.as<std::string>());
    Args args;
    if (auto a = n.find("args"))
      for (const auto& [k, v] : a->entries()) {
        if (std::find(params.begin(), params.end(), k) == params.end())
          v.fail_unknown_key(" (the block's params: " + (params.empty() ? "none" : join(params)) + ")");
        args.emplace(k, substitute(v, outer));
      }
    for (const std::string& p : params)
      if (!args.count(p)) (n.find("args") ? *n.find("args") : n).fail_missing_key(p, " (a param of the block)");
    return args;
  }

  // v itself, or the value its "$name" stands for.
  static YamlValue substitute(const YamlValue& v, const Args& args) {
    if (!v.node().IsScalar() || v.node().Scalar().empty() || v.node().Scalar()[0] != '$') return v;
    const std::string name = v.node().Scalar().substr(1);
    const auto it = args.find(name);
    if (it == args.end()) {
      std::vector<std::string> known;
      for (const auto& [k, a] : args) known.push_back("$" + k);
      v.fail("unknown parameter $" + name + " (known here: " + join(known) + ")");
    }
    return it->second;
  }

  // Integer key of an op (a literal or a $param) within [lo, hi].
  static int64_t integer(const YamlValue& n, const char* key, const Args& args, std::optional<int64_t> fallback,
                         int64_t lo, int64_t hi = int64_t{1} << 24) {
    const auto v = n.find(key);
    if (!v) {
      if (!fallback) n.fail_missing_key(key);
      return *fallback;
    }
    const YamlValue s = substitute(*v, args);
    const int64_t x = s.as<int64_t>();
    if (x < lo || x > hi)
      v->fail("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(x));
    return x;
  }

  static bool flag(const YamlValue& n, const char* key, const Args& args, bool fallback) {
    const auto v = n.find(key);
    return v ? substitute(*v, args).as<bool>() : fallback;
  }

  static double real(const YamlValue& n, const char* key, const Args& args, double fallback, double lo, double hi) {
    const auto v = n.find(key);
    if (!v) return fallback;
    const double x = substitute(*v, args).as<double>();
    if (!(x >= lo && x <= hi))
      v->fail("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(x));
    return x;
  }

  ModulePtr make_module(const std::string& op, const YamlValue& n, const Args& a) {
    if (op == "conv2d") {
      Conv2dOptions o{integer(n, "in", a, {}, 1), integer(n, "out", a, {}, 1), integer(n, "kernel", a, {}, 1)};
      o.stride = integer(n, "stride", a, 1, 1);
      o.padding = integer(n, "padding", a, 0, 0);
      o.dilation = integer(n, "dilation", a, 1, 1);
      o.groups = integer(n, "groups", a, 1, 1);
      o.bias = flag(n, "bias", a, true);
      if (o.in_channels % o.groups || o.out_channels % o.groups)
        n.get("groups").fail("must divide in (" + std::to_string(o.in_channels) + ") and out (" +
                             std::to_string(o.out_channels) + "), got " + std::to_string(o.groups));
      return std::make_shared<Conv2d>(o, gen_);
    }
    if (op == "linear")
      return std::make_shared<Linear>(integer(n, "in", a, {}, 1), integer(n, "out", a, {}, 1), gen_,
                                      flag(n, "bias", a, true));
    if (op == "batch_norm")
      return std::make_shared<BatchNorm2d>(integer(n, "channels", a, {}, 1),
                                           static_cast<float>(real(n, "eps", a, 1e-5, 1e-12, 1)),
                                           static_cast<float>(real(n, "momentum", a, 0.1, 0, 1)));
    if (op == "relu") return std::make_shared<ReLU>();
    if (op == "relu6") return std::make_shared<ReLU6>();
    if (op == "hardswish") return std::make_shared<Hardswish>();
    if (op == "flatten") return std::make_shared<Flatten>();
    if (op == "identity") return std::make_shared<Identity>();
    if (op == "dropout")
      return std::make_shared<Dropout>(static_cast<float>(real(n, "p", a, 0.5, 0, 0.999)), dropout_gen_);
    if (op == "max_pool") {
      const int64_t k = integer(n, "kernel", a, {}, 1);
      return std::make_shared<MaxPool2d>(k, integer(n, "stride", a, k, 1), integer(n, "padding", a, 0, 0, k / 2));
    }
    const int64_t size = integer(n, "size", a, 1, 1);  // adaptive_avg_pool
    return std::make_shared<AdaptiveAvgPool2d>(size, size);
  }

  std::string file_;
  YamlValue root_;
  Generator gen_;
  std::shared_ptr<Generator> dropout_gen_;
  Args top_args_;
  std::map<std::string, YamlValue> blocks_;
  std::vector<std::string> open_;  // blocks being expanded, outermost first
  std::shared_ptr<Graph> graph_ = std::make_shared<Graph>();
};

}  // namespace

std::shared_ptr<Graph> load_model_file(const std::string& path, int64_t num_classes, uint64_t seed) {
  return Builder(path, load_yaml_file(path), num_classes, seed).build();
}

ModulePtr make_configured_model(const ModelConfig& model, uint64_t seed) {
  if (!model.file.empty()) return load_model_file(model.file, model.num_classes, seed);
  if (!model.onnx.empty()) return import_onnx(model.onnx);
  return make_model(model.name, model.num_classes, seed, model.options());
}

std::string model_file_name(const std::string& path) {
  const YamlValue root = load_yaml_file(path);
  if (!root.is_map()) root.fail("expected a model (a mapping with name, blocks and nodes), got " + root.describe());
  return root.get("name").as<std::string>();
}

void dry_run_model(const ModelConfig& model, int64_t image_size) {
  dry_run(model, *make_configured_model(model, 0), image_size);
}

void dry_run(const ModelConfig& model, Module& g, int64_t image_size) {
  const std::string& path = model.file.empty() ? model.onnx : model.file;
  g.eval();
  NoGradGuard no_grad;
  Tensor y;
  try {
    y = g.forward(Tensor::zeros({1, 3, image_size, image_size}));
  } catch (const Error& e) {
    QAT_FAIL(path, ": the network does not run on ", image_size, "x", image_size, " images: ", e.what());
  }
  QAT_CHECK(y.dim() == 2 && y.size(1) == model.num_classes, path, ": the network's output is ", y.sizes(),
            " for one image; a classifier of model.num_classes (", model.num_classes, ") gives (1, ",
            model.num_classes, ")");
}

}  // namespace qat::apps
