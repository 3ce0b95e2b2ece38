#include "apps/onnx_import.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "layers/layers.h"

namespace qat::apps {

namespace {

// A constant: an initializer or a Constant node's value.
struct Constant {
  std::vector<int64_t> dims;
  bool is_float = false;
  std::vector<float> f;    // FLOAT
  std::vector<int64_t> i;  // INT64 / INT32
  // (saturating: a hostile file's dimensions must not overflow the product)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n = d != 0 && n > (int64_t{1} << 40) / d ? (int64_t{1} << 40) : n * d;
    return n;
  }
};

template <class T>
std::vector<T> raw_values(const std::string& raw, int64_t n, const std::string& name) {
  QAT_CHECK(static_cast<int64_t>(raw.size()) == n * static_cast<int64_t>(sizeof(T)), "ONNX tensor '", name,
            "': raw data of ", raw.size(), " bytes for ", n, " values");
  std::vector<T> v(static_cast<size_t>(n));
  if (n > 0) std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

Constant read_tensor(const onnx::TensorProto& t) {
  QAT_CHECK(t.data_location() != onnx::TensorProto::EXTERNAL, "ONNX tensor '", t.name(),
            "' is stored in an external file, which qat does not read (save the model with its weights inside)");
  Constant c;
  for (int64_t d : t.dims()) {
    QAT_CHECK(d >= 0 && d <= (int64_t{1} << 31), "ONNX tensor '", t.name(), "': dimension ", d);
    c.dims.push_back(d);
  }
  const int64_t n = c.numel();
  QAT_CHECK(n <= (int64_t{1} << 31), "ONNX tensor '", t.name(), "': ", n, " values");
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      c.f = t.has_raw_data() ? raw_values<float>(t.raw_data(), n, t.name())
                             : std::vector<float>(t.float_data().begin(), t.float_data().end());
      QAT_CHECK(static_cast<int64_t>(c.f.size()) == n, "ONNX tensor '", t.name(), "': ", c.f.size(),
                " values for its shape of ", n);
      c.is_float = true;
      break;
    case onnx::TensorProto::INT64:
      c.i = t.has_raw_data() ? raw_values<int64_t>(t.raw_data(), n, t.name())
                             : std::vector<int64_t>(t.int64_data().begin(), t.int64_data().end());
      break;
    case onnx::TensorProto::INT32: {
      const std::vector<int32_t> v = t.has_raw_data() ? raw_values<int32_t>(t.raw_data(), n, t.name())
                                                      : std::vector<int32_t>(t.int32_data().begin(), t.int32_data().end());
      c.i.assign(v.begin(), v.end());
      break;
    }
    default:
      QAT_FAIL("ONNX tensor '", t.name(), "' has data type ", t.data_type(),
               "; qat imports float models (float weights, int64 shapes)");
  }
  return c;
}

std::string sanitized(std::string s) {
  for (char& ch : s)
    if (ch == '/' || ch == '.' || ch == ':' || ch == ' ') ch = '_';
  const size_t first = s.find_first_not_of('_');
  return first == std::string::npos ? std::string() : s.substr(first);
}

class Importer {
 public:
  Importer(const onnx::ModelProto& m, std::string path) : m_(m), path_(std::move(path)) {}

  std::shared_ptr<Graph> run() {
    check_opset();
    const onnx::GraphProto& g = m_.graph();
    for (const onnx::TensorProto& t : g.initializer()) {
      try {
        constants_[t.name()] = read_tensor(t);
      } catch (const Error& e) {
        QAT_FAIL(path_, ": initializer: ", e.what());
      }
    }
    find_input(g);
    for (const onnx::NodeProto& n : g.node())
      for (const std::string& in : n.input()) ++readers_[in];
    for (int i = 0; i < g.node_size(); ++i) {
      try {
        add_node(g.node(i), i);
      } catch (const Error& e) {  // (a layer's or the graph's refusal, said of the node it came from)
        const std::string what = e.what();
        if (what.rfind(path_, 0) == 0) throw;
        QAT_FAIL(which(g.node(i)), ": ", what);
      }
    }
    QAT_CHECK(g.output_size() == 1, path_, ": the graph has ", g.output_size(), " outputs; qat imports one (the logits)");
    graph_->set_output(value(g.output(0).name(), "the graph output"));
    graph_->check();
    return graph_;
  }

 private:
  void check_opset() const {
    bool found = false;
    for (const onnx::OperatorSetIdProto& o : m_.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        QAT_CHECK(o.version() >= 11 && o.version() <= 17, path_, ": opset ", o.version(),
                  "; qat imports opsets 11 to 17 (export again with opset_version in that range)");
        found = true;
      }
    QAT_CHECK(found, path_, ": no opset_import for the default domain (which version of the operators it uses is "
              "unknown); qat imports opsets 11 to 17");
  }

  void find_input(const onnx::GraphProto& g) {
    std::vector<std::string> inputs;
    for (const onnx::ValueInfoProto& v : g.input())
      if (!constants_.count(v.name())) inputs.push_back(v.name());
    QAT_CHECK(inputs.size() == 1, path_, ": the graph has ", inputs.size(),
              " inputs besides its weights; qat imports one (the images, N x 3 x H x W)");
    values_[inputs[0]] = Graph::kInput;
  }

  // What names a node in errors: "ONNX node '<name>' (<op>)".
  std::string which(const onnx::NodeProto& n) const {
    return path_ + ": ONNX node '" + n.name() + "' (" + n.op_type() + ")";
  }

  // The graph node that computes ONNX value `name`.
  std::string value(const std::string& name, const std::string& what) const {
    const auto it = values_.find(name);
    QAT_CHECK(it != values_.end(), what.rfind(path_, 0) == 0 ? "" : path_ + ": ", what, " reads '", name,
              constants_.count(name) ? "', a constant where qat takes a computed tensor" : "', which no node computes");
    return it->second;
  }

  const Constant* constant(const onnx::NodeProto& n, int input) const {
    if (input >= n.input_size() || n.input(input).empty()) return nullptr;
    const auto it = constants_.find(n.input(input));
    return it == constants_.end() ? nullptr : &it->second;
  }

  const Constant& required_constant(const onnx::NodeProto& n, int input, const char* what) const {
    const Constant* c = constant(n, input);
    QAT_CHECK(c != nullptr, which(n), ": its ", what, " (input ", input, ") must be a constant (an initializer or a "
              "Constant node)");
    return *c;
  }

  static const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
    for (const onnx::AttributeProto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  static int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
    const onnx::AttributeProto* a = attr(n, name);
    return a ? a->i() : fallback;
  }
  static std::vector<int64_t> ints_attr(const onnx::NodeProto& n, const std::string& name) {
    const onnx::AttributeProto* a = attr(n, name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
  }

  // One value for both spatial dimensions of a 2-D window attribute.
  int64_t square(const onnx::NodeProto& n, const std::string& name, int64_t fallback) const {
    const std::vector<int64_t> v = ints_attr(n, name);
    if (v.empty()) return fallback;
    const bool pads = name == "pads";
    QAT_CHECK(v.size() == (pads ? 4u : 2u), which(n), ": ", name, " has ", v.size(),
              " values; qat imports 2-D windows");
    for (int64_t x : v)
      QAT_CHECK(x == v[0], which(n), ": ", name, " differ by dimension", pads ? " or side" : "", " (",
                v[0], " and ", x, "); qat's layers take square windows with symmetric padding");
    return v[0];
  }

  void refuse_attrs(const onnx::NodeProto& n, const std::set<std::string>& known) const {
    for (const onnx::AttributeProto& a : n.attribute()) {
      QAT_CHECK(known.count(a.name()), which(n), ": attribute ", a.name(), " is not imported");
      if (a.name() == "auto_pad")
        QAT_CHECK(a.s() == "NOTSET", which(n), ": auto_pad ", a.s(), "; qat imports explicit pads");
    }
  }

  // The module's name: its weight's initializer when that reads as a
  // state-dict name, else the node's name; unique.
  std::string module_name(const onnx::NodeProto& n, int weight_input) {
    std::string name;
    if (weight_input >= 0 && weight_input < n.input_size()) {
      const auto from = source_names_.find(n.input(weight_input));
      const std::string& w = from == source_names_.end() ? n.input(weight_input) : from->second;
      const size_t dot = w.rfind(".weight");
      if (dot != std::string::npos && dot + 7 == w.size() && w.find(':') == std::string::npos &&
          w.find('/') == std::string::npos)
        name = w.substr(0, dot);
    }
    if (name.empty()) name = sanitized(n.name());
    if (name.empty()) name = n.op_type() + "_" + std::to_string(graph_->nodes().size());
    std::string unique = name;
    for (int k = 2; used_.count(unique); ++k) unique = name + "_" + std::to_string(k);
    used_.insert(unique);
    return unique;
  }

  void add_module(const onnx::NodeProto& n, ModulePtr m, int weight_input) {
    QAT_CHECK(n.output_size() >= 1, which(n), ": no output");
    const std::string input = value(n.input(0), which(n));
    const std::string name = module_name(n, weight_input);
    graph_->add(name, std::move(m), input);
    graph_->set_origin(name, "ONNX node '" + n.name() + "' (" + n.op_type() + ")");
    values_[n.output(0)] = name;
  }

  // c's values, which must be floats (qat imports float weights).
  const std::vector<float>& floats(const onnx::NodeProto& n, const Constant& c, const char* what) const {
    QAT_CHECK(c.is_float, which(n), ": its ", what, " holds integers; qat imports float weights");
    return c.f;
  }
  // t's values from the constant `what` of node n.
  void fill(const onnx::NodeProto& n, Tensor& t, const Constant& c, const char* what) const {
    const std::vector<float>& v = floats(n, c, what);
    QAT_CHECK(static_cast<int64_t>(v.size()) == t.numel(), which(n), ": its ", what, " has ", v.size(),
              " values for a shape of ", shape_str(t.sizes()));
    if (!v.empty()) std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
  }

  void add_node(const onnx::NodeProto& n, int index) {
    const std::string& op = n.op_type();
    QAT_CHECK(n.domain().empty() || n.domain() == "ai.onnx", which(n), ": domain ", n.domain(), " is not imported");
    QAT_CHECK(n.output_size() >= 1 && !n.output(0).empty() && (op == "Constant" || n.input_size() >= 1), which(n),
              ": ", n.input_size(), " inputs and ", n.output_size(), " outputs");
    for (const std::string& out : n.output())  // (a later reader could not tell which node it means)
      QAT_CHECK(out.empty() || (!values_.count(out) && !constants_.count(out)), which(n), ": its output '", out,
                "' is written by an earlier node or initializer too");
    if (op == "Constant") return add_constant(n);
    if (op == "Conv") return add_conv(n);
    if (op == "BatchNormalization") return add_batch_norm(n);
    if (op == "Relu") {
      refuse_attrs(n, {});
      return add_module(n, std::make_shared<ReLU>(), -1);
    }
    if (op == "Clip") return add_clip(n);
    if (op == "Add") return add_add(n);
    if (op == "Concat") return add_concat(n);
    if (op == "MaxPool" || op == "AveragePool") return add_pool(n);
    if (op == "GlobalAveragePool") return add_module(n, std::make_shared<AdaptiveAvgPool2d>(1, 1), -1);
    if (op == "Flatten") {
      QAT_CHECK(int_attr(n, "axis", 1) == 1, which(n), ": axis ", int_attr(n, "axis", 1), "; qat imports axis 1");
      return add_module(n, std::make_shared<Flatten>(), -1);
    }
    if (op == "Reshape") return add_reshape(n);
    if (op == "Gemm") return add_gemm(n);
    if (op == "MatMul") return add_matmul(n);
    if (op == "Dropout" || op == "Identity") {
      if (const auto c = constants_.find(n.input(0)); c != constants_.end()) {
        // a weight passed on under another name (torch.onnx.export without
        // constant folding): the name it came from still names the module
        constants_[n.output(0)] = c->second;
        const auto from = source_names_.find(n.input(0));
        source_names_[n.output(0)] = from == source_names_.end() ? n.input(0) : from->second;
      } else {
        values_[n.output(0)] = value(n.input(0), which(n));
      }
      return;
    }
    QAT_FAIL(which(n), " (node ", index, "): op ", op, " is not imported; qat imports Conv, BatchNormalization, Relu, "
             "Clip (as ReLU6), Add, Concat, MaxPool, AveragePool, GlobalAveragePool, Flatten, Reshape (to N x -1), "
             "Gemm, MatMul (+ Add), Dropout, Identity and Constant");
  }

  void add_constant(const onnx::NodeProto& n) {
    const onnx::AttributeProto* v = attr(n, "value");
    QAT_CHECK(v != nullptr && v->has_t(), which(n), ": only a tensor value is imported");
    constants_[n.output(0)] = read_tensor(v->t());
  }

  void add_conv(const onnx::NodeProto& n) {
    refuse_attrs(n, {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"});
    const Constant& w = required_constant(n, 1, "weight");
    QAT_CHECK(w.dims.size() == 4, which(n), ": weight of rank ", w.dims.size(), "; qat imports 2-D convolutions");
    QAT_CHECK(w.dims[2] == w.dims[3], which(n), ": a ", w.dims[2], "x", w.dims[3],
              " kernel; qat's Conv2d takes square kernels");
    const int64_t kernel_shape = square(n, "kernel_shape", w.dims[2]);
    QAT_CHECK(kernel_shape == w.dims[2], which(n), ": kernel_shape ", kernel_shape, " for a weight of ", w.dims[2],
              "x", w.dims[3]);
    const int64_t groups = int_attr(n, "group", 1);
    const Constant* b = constant(n, 2);
    QAT_CHECK(n.input_size() < 3 || n.input(2).empty() || b, which(n), ": its bias must be a constant");
    Conv2dOptions o{w.dims[1] * groups, w.dims[0], w.dims[2], square(n, "strides", 1), square(n, "pads", 0),
                    square(n, "dilations", 1), groups, b != nullptr};
    Generator unused(0);
    auto conv = std::make_shared<Conv2d>(o, unused);
    fill(n, conv->weight, w, "weight");
    if (b) fill(n, conv->bias, *b, "bias");
    add_module(n, conv, 1);
  }

  void add_batch_norm(const onnx::NodeProto& n) {
    refuse_attrs(n, {"epsilon", "momentum", "training_mode", "spatial"});
    const Constant& scale = required_constant(n, 1, "scale");
    const float eps = attr(n, "epsilon") ? attr(n, "epsilon")->f() : 1e-5f;
    const float momentum = attr(n, "momentum") ? attr(n, "momentum")->f() : 0.9f;
    auto bn = std::make_shared<BatchNorm2d>(scale.numel(), eps, 1.f - momentum);
    fill(n, bn->weight, scale, "scale");
    fill(n, bn->bias, required_constant(n, 2, "bias"), "bias");
    fill(n, bn->running_mean, required_constant(n, 3, "mean"), "mean");
    fill(n, bn->running_var, required_constant(n, 4, "variance"), "variance");
    add_module(n, bn, 1);
  }

  void add_clip(const onnx::NodeProto& n) {
    refuse_attrs(n, {});
    const Constant* lo = constant(n, 1);
    const Constant* hi = constant(n, 2);
    QAT_CHECK((n.input_size() < 2 || n.input(1).empty() || lo) && (n.input_size() < 3 || n.input(2).empty() || hi),
              which(n), ": its bounds must be constants");
    auto bound = [&](const Constant* c) { return c && c->f.size() == 1 ? std::optional<float>(c->f[0]) : std::nullopt; };
    const std::optional<float> a = bound(lo), b = bound(hi);
    if (a && *a == 0.f && b && *b == 6.f) return add_module(n, std::make_shared<ReLU6>(), -1);
    if (a && *a == 0.f && !hi) return add_module(n, std::make_shared<ReLU>(), -1);
    QAT_FAIL(which(n), ": bounds ", a ? std::to_string(*a) : "none", " and ", b ? std::to_string(*b) : "none",
             "; qat imports Clip to [0, 6] (ReLU6) and to [0, inf) (ReLU)");
  }

  void add_add(const onnx::NodeProto& n) {
    QAT_CHECK(n.input_size() == 2, which(n), ": ", n.input_size(), " inputs");
    for (int k = 0; k < 2; ++k)
      if (const Constant* c = constant(n, k)) return add_bias(n, *c, n.input(1 - k));
    const std::string name = module_name(n, -1);
    graph_->add_op(name, GraphOp::add, {value(n.input(0), which(n)), value(n.input(1), which(n))});
    graph_->set_origin(name, "ONNX node '" + n.name() + "' (Add)");
    values_[n.output(0)] = name;
  }

  // MatMul + Add of a constant: the bias of the MatMul's Linear.
  void add_bias(const onnx::NodeProto& n, const Constant& bias, const std::string& other) {
    const auto it = matmuls_.find(other);
    QAT_CHECK(it != matmuls_.end() && readers_[other] == 1, which(n),
              ": an Add of a constant is imported only as the bias of the MatMul it follows");
    Linear& l = *it->second;
    QAT_CHECK(bias.numel() == l.out_features, which(n), ": a bias of ", bias.numel(), " values for ",
              l.out_features, " outputs");
    fill(n, l.bias, bias, "bias (the Add's constant)");
    values_[n.output(0)] = values_.at(other);
  }

  void add_concat(const onnx::NodeProto& n) {
    QAT_CHECK(int_attr(n, "axis", 0) == 1, which(n), ": axis ", int_attr(n, "axis", 0),
              "; qat concatenates on channels (axis 1)");
    std::vector<std::string> inputs;
    for (const std::string& in : n.input()) inputs.push_back(value(in, which(n)));
    const std::string name = module_name(n, -1);
    graph_->add_op(name, GraphOp::concat, inputs);
    graph_->set_origin(name, "ONNX node '" + n.name() + "' (Concat)");
    values_[n.output(0)] = name;
  }

  void add_pool(const onnx::NodeProto& n) {
    const bool max = n.op_type() == "MaxPool";
    refuse_attrs(n, {"kernel_shape", "strides", "pads", "ceil_mode", "auto_pad", "count_include_pad", "dilations",
                     "storage_order"});
    QAT_CHECK(int_attr(n, "ceil_mode", 0) == 0, which(n), ": ceil_mode 1; qat's pools round down");
    QAT_CHECK(square(n, "dilations", 1) == 1, which(n), ": dilated pooling is not imported");
    QAT_CHECK(n.output_size() == 1 || n.output(1).empty(), which(n), ": the indices output is not imported");
    const int64_t k = square(n, "kernel_shape", 0);
    QAT_CHECK(k >= 1, which(n), ": no kernel_shape");
    const int64_t s = square(n, "strides", 1), p = square(n, "pads", 0);
    if (max) return add_module(n, std::make_shared<MaxPool2d>(k, s, p), -1);
    add_module(n, std::make_shared<AvgPool2d>(k, s, p, int_attr(n, "count_include_pad", 0) != 0), -1);
  }

  void add_reshape(const onnx::NodeProto& n) {
    const Constant& shape = required_constant(n, 1, "shape");
    QAT_CHECK(shape.i.size() == 2 && shape.i[1] == -1 && shape.i[0] >= 0, which(n), ": shape [",
              [&] {
                std::string s;
                for (int64_t x : shape.i) s += (s.empty() ? "" : ", ") + std::to_string(x);
                return s;
              }(),
              "]; qat imports Reshape to (N, -1) only, as Flatten");
    add_module(n, std::make_shared<Flatten>(), -1);
  }

  void add_gemm(const onnx::NodeProto& n) {
    refuse_attrs(n, {"alpha", "beta", "transA", "transB"});
    QAT_CHECK(int_attr(n, "transA", 0) == 0, which(n), ": transA 1 is not imported");
    for (const char* a : {"alpha", "beta"})
      QAT_CHECK(!attr(n, a) || attr(n, a)->f() == 1.f, which(n), ": ", a, " ", attr(n, a)->f(), "; qat imports 1");
    const Constant& b = required_constant(n, 1, "B (the weight)");
    QAT_CHECK(b.dims.size() == 2, which(n), ": B of rank ", b.dims.size());
    const bool trans = int_attr(n, "transB", 0) != 0;
    const Constant* c = constant(n, 2);
    auto l = linear(n, b, trans, c != nullptr);
    if (c) {
      QAT_CHECK(c->numel() == l->out_features, which(n), ": C of ", c->numel(), " values for ", l->out_features,
                " outputs (qat imports a bias per output)");
      fill(n, l->bias, *c, "C (the bias)");
    }
    add_module(n, l, 1);
  }

  void add_matmul(const onnx::NodeProto& n) {
    const Constant& b = required_constant(n, 1, "B (the weight)");
    QAT_CHECK(b.dims.size() == 2, which(n), ": B of rank ", b.dims.size());
    auto l = linear(n, b, false, true);
    std::fill_n(l->bias.data<float>(), l->out_features, 0.f);  // (its value; an Add may bring the bias)
    add_module(n, l, 1);
    matmuls_[n.output(0)] = l;
  }

  // A Linear from B ((out, in) when transposed, else (in, out)).
  std::shared_ptr<Linear> linear(const onnx::NodeProto& n, const Constant& b, bool transposed, bool bias) const {
    const std::vector<float>& f = floats(n, b, "B (the weight)");  // (as many as b.dims say: read_tensor checks)
    const int64_t out = transposed ? b.dims[0] : b.dims[1], in = transposed ? b.dims[1] : b.dims[0];
    Generator unused(0);
    auto l = std::make_shared<Linear>(in, out, unused, bias);
    float* w = l->weight.data<float>();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) w[o * in + i] = transposed ? f[o * in + i] : f[i * out + o];
    return l;
  }

  const onnx::ModelProto& m_;
  std::string path_;
  std::map<std::string, Constant> constants_;
  std::map<std::string, std::string> values_;  // ONNX value -> graph node (or "input")
  std::map<std::string, std::string> source_names_;  // constant passed on by Identity -> the initializer's name
  std::map<std::string, int> readers_;
  std::map<std::string, std::shared_ptr<Linear>> matmuls_;
  std::set<std::string> used_;
  std::shared_ptr<Graph> graph_ = std::make_shared<Graph>();
};

}  // namespace

std::shared_ptr<Graph> import_onnx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QAT_CHECK(in.good(), path, ": cannot open the ONNX file");
  onnx::ModelProto m;
  QAT_CHECK(m.ParseFromIstream(&in), path, ": not an ONNX model (protobuf parse failed: a truncated or other file)");
  QAT_CHECK(m.has_graph(), path, ": an ONNX model without a graph");
  return Importer(m, path).run();
}

}  // namespace qat::apps
