// Note [prepare on graphs]
// prepare() of a Graph follows its edges, not a children list:
//  1. Fusion. A Conv2d node whose only reader is a BatchNorm2d node, and a
//     node whose only reader is a ReLU or ReLU6 node, fuse as the chain's
//     patterns do (the longest the backend lists: conv+bn+relu,
//     conv+bn+relu6, conv+bn, conv+relu, conv+relu6, conv; linear+relu,
//     linear) into a QatConv2d / QatLinear on the conv's node; the fused
//     nodes keep their names and become Identity. A pattern the backend
//     lacks stays float and is reported.
//  2. Quantizers, node by node in graph order, tracking which grid each
//     node's value lies on: a QAT layer reading a float value (the network
//     input) quantizes it on its input; every QAT layer's output is
//     quantized unless it is the graph's output (the logits stay float);
//     Identity, max-pool, flatten, dropout and a ReLU/ReLU6 keep their
//     input's grid; adaptive average pooling rounds onto its input's grid
//     (AvgPoolOnGrid: the pool and a SharedFakeQuantizer, as on chains); an add of two quantized values
//     is one quantized op (backend pattern add, or add+relu when a ReLU node
//     alone reads it): its output quantizer goes after the ReLU, or on a
//     node inserted after the add, "<add>_quant". A concat of quantized
//     branches is one quantized op too (backend pattern concat): its output
//     quantizer on a node "<concat>_quant" after it (Note [integer concat]).
// An output quantizer takes the activation bits of the one QAT layer that
// reads it (Note [activation overrides]), else its producer's.
#include <algorithm>
#include <map>
#include <set>

#include "layers/layers.h"
#include "quant/sim/avg_pool_on_grid.h"
#include "quant/sim/prepare_detail.h"
#include "quant/sim/qat_modules.h"

namespace qat::quant {

using namespace prepare_detail;

namespace {

template <class T>
T* as(Module* m) {
  return dynamic_cast<T*>(m);
}

// Modules whose output lies on their input's grid.
bool keeps_grid(Module* m) {
  return as<Identity>(m) || as<MaxPool2d>(m) || as<Flatten>(m) || as<Dropout>(m) || as<ReLU>(m) || as<ReLU6>(m);
}

class GraphPreparer {
 public:
  GraphPreparer(Graph& g, const Backend& b, const QConfig& q) : g_(g), b_(b), q_(q) {}

  PrepareReport run() {
    for (const std::string& node : g_.order()) fuse(node);
    QAT_CHECK(!layers_.empty(), "prepare: backend '", b_.name,
              "' quantizes none of the graph's layers (patterns it lists do not occur)");
    check_overrides(q_, report_);
    for (const std::string& node : g_.order()) place_quantizers(node);
    return report_;
  }

 private:
  bool allowed(Pattern p) const { return b_.patterns.count(p) > 0; }

  // The node's only reader when it is a module node of type T (and the
  // node is not the graph's output); else empty.
  template <class T>
  std::string only_reader(const std::string& node) const {
    const std::vector<std::string> r = g_.readers(node);
    if (r.size() != 1 || node == g_.output() || !as<T>(g_.module(r[0]))) return "";
    return r[0];
  }
  std::string activation_after(const std::string& node) const {
    std::string r = only_reader<ReLU>(node);
    return r.empty() ? only_reader<ReLU6>(node) : r;
  }

  // Step 1 for one node.
  void fuse(const std::string& node) {
    Module* m = g_.module(node);
    if (auto* conv = as<Conv2d>(m)) return fuse_conv(node, *conv);
    if (auto* lin = as<Linear>(m)) return fuse_linear(node, *lin);
  }

  void fuse_conv(const std::string& node, const Conv2d& conv) {
    const std::string bn = only_reader<BatchNorm2d>(node);
    const std::string act = activation_after(bn.empty() ? node : bn);
    const bool six = !act.empty() && as<ReLU6>(g_.module(act));
    std::vector<Pattern> tries;
    if (!bn.empty() && !act.empty()) tries.push_back(six ? Pattern::conv_bn_relu6 : Pattern::conv_bn_relu);
    if (!bn.empty()) tries.push_back(Pattern::conv_bn);
    if (bn.empty() && !act.empty()) tries.push_back(six ? Pattern::conv_relu6 : Pattern::conv_relu);
    tries.push_back(Pattern::conv);
    for (const Pattern p : tries) {
      if (!allowed(p)) continue;
      const bool with_bn = p == Pattern::conv_bn || p == Pattern::conv_bn_relu || p == Pattern::conv_bn_relu6;
      const bool with_act = p != Pattern::conv && p != Pattern::conv_bn;
      const auto bn_module = with_bn ? std::dynamic_pointer_cast<BatchNorm2d>(shared_of(bn)) : nullptr;
      auto qc = std::make_shared<QatConv2d>(conv, bn_module, with_act && !six, weight_config(b_, q_, node));
      qc->relu6 = with_act && six;
      std::vector<std::string> fused;
      if (with_bn) fused.push_back(bn);
      if (with_act) fused.push_back(act);
      return add_layer(node, qc, p, qc->weight_fake_quant->config().spec, fused);
    }
    report_.float_layers.push_back(node);
  }

  void fuse_linear(const std::string& node, const Linear& lin) {
    const std::string act = only_reader<ReLU>(node);
    Pattern p;
    if (!act.empty() && allowed(Pattern::linear_relu)) p = Pattern::linear_relu;
    else if (allowed(Pattern::linear)) p = Pattern::linear;
    else return report_.float_layers.push_back(node);
    auto ql = std::make_shared<QatLinear>(lin, p == Pattern::linear_relu, weight_config(b_, q_, node));
    std::vector<std::string> fused;
    if (p == Pattern::linear_relu) fused.push_back(act);
    add_layer(node, ql, p, ql->weight_fake_quant->config().spec, fused);
  }

  ModulePtr shared_of(const std::string& name) const {
    ModulePtr m = g_.shared_module(name);
    QAT_CHECK(m != nullptr, "prepare: no module at graph node '", name, "'");
    return m;
  }

  void add_layer(const std::string& node, ModulePtr layer, Pattern p, const QuantSpec& w,
                 const std::vector<std::string>& fused) {
    Module* raw = layer.get();
    g_.replace_module(node, std::move(layer));
    for (const std::string& f : fused) g_.replace_module(f, std::make_shared<Identity>());
    last_of_[node] = fused.empty() ? node : fused.back();
    layers_[node] = raw;
    report_.layers.push_back({node, pattern_name(p), w, std::nullopt, std::nullopt});
  }

  PreparedLayer& report_of(const std::string& layer) {
    for (PreparedLayer& l : report_.layers)
      if (l.name == layer) return l;
    QAT_FAIL("prepare: no report for layer '", layer, "'");
  }

  // The one QAT layer that reads node's value, through nodes that keep its
  // grid; else empty.
  std::string single_consumer(const std::string& node) const {
    std::set<std::string> found;
    std::vector<std::string> todo = g_.readers(node);
    while (!todo.empty()) {
      const std::string r = todo.back();
      todo.pop_back();
      if (layers_.count(r)) {
        found.insert(r);
      } else if (keeps_grid(g_.module(r)) || as<AdaptiveAvgPool2d>(g_.module(r))) {
        for (const std::string& next : g_.readers(r)) todo.push_back(next);
      } else {
        return "";
      }
    }
    return found.size() == 1 ? *found.begin() : "";
  }

  std::shared_ptr<FakeQuantizer> output_quantizer(const std::string& node, const std::string& producer) {
    const std::string consumer = single_consumer(node);
    return activation_quantizer(b_, q_, consumer.empty() ? producer : consumer);
  }

  // The grid node's value lies on (null: float).
  std::shared_ptr<FakeQuantizer> grid(const std::string& node) const {
    const auto it = grid_.find(node);
    return it == grid_.end() ? nullptr : it->second;
  }

  // Step 2 for one node.
  void place_quantizers(const std::string& node) {
    const GraphNode n = g_.node(node);  // a copy: insert_after() grows the node list
    if (n.op == GraphOp::add) return quantize_add(n);
    if (n.op == GraphOp::concat) return quantize_concat(n);
    if (const auto it = layers_.find(node); it != layers_.end()) return quantize_layer(n, it->second);
    Module* m = g_.module(node);
    const std::shared_ptr<FakeQuantizer> in = grid(n.inputs[0]);
    if (keeps_grid(m)) grid_[node] = in;  // the fused BN/ReLU nodes too: they are Identity now
    else if (as<AdaptiveAvgPool2d>(m) && in) {
      g_.replace_module(node, std::make_shared<AvgPoolOnGrid>(shared_of(node), std::make_shared<SharedFakeQuantizer>(in)));
      grid_[node] = in;
    }
  }

  void quantize_layer(const GraphNode& n, Module* layer) {
    const std::string& name = n.name;
    PreparedLayer& info = report_of(name);
    const bool reads_input = n.inputs[0] == Graph::kInput;
    const std::shared_ptr<FakeQuantizer> in = grid(n.inputs[0]);
    const std::string& last = last_of_.at(name);  // its value is the layer's output
    auto set = [&](auto& l) {
      if (!in) {
        l.set_input_quantizer(reads_input ? input_quantizer(b_, q_, name) : activation_quantizer(b_, q_, name));
        info.input = l.input_fake_quant->config().spec;
      }
      if (last == g_.output()) return;  // the logits stay float
      auto out = output_quantizer(last, name);
      l.set_output_quantizer(out);
      info.output = out->config().spec;
      grid_[name] = out;
    };
    if (auto* c = as<QatConv2d>(layer)) set(*c);
    else if (auto* l = as<QatLinear>(layer)) set(*l);
  }

  void quantize_add(const GraphNode& n) {
    const bool inputs_quantized = grid(n.inputs[0]) && grid(n.inputs[1]);
    const std::string relu = only_reader<ReLU>(n.name);
    const bool with_relu = !relu.empty() && allowed(Pattern::add_relu);
    if (!inputs_quantized || (!with_relu && !allowed(Pattern::add))) {
      report_.float_layers.push_back(n.name + " (add)");
      return;
    }
    const std::string at = with_relu ? relu : n.name;
    auto out = output_quantizer(at, n.name);
    if (with_relu) {
      g_.replace_module(relu, std::make_shared<Sequential>(std::vector<ModulePtr>{shared_of(relu), out}));
      grid_[relu] = out;
    } else {
      grid_[g_.insert_after(n.name, n.name + "_quant", out)] = out;
    }
    report_.adds.push_back({n.name, with_relu ? "add+relu" : "add", out->config().spec});
  }

  void quantize_concat(const GraphNode& n) {
    const bool inputs_quantized =
        std::all_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& in) { return grid(in) != nullptr; });
    if (!inputs_quantized || !allowed(Pattern::concat)) {
      report_.float_layers.push_back(n.name + " (concat)");
      return;
    }
    auto out = output_quantizer(n.name, n.name);
    grid_[g_.insert_after(n.name, n.name + "_quant", out)] = out;
    report_.adds.push_back({n.name, "concat", out->config().spec});
  }

  Graph& g_;
  const Backend& b_;
  const QConfig& q_;
  PrepareReport report_;
  std::map<std::string, Module*> layers_;                         // QAT layer nodes
  std::map<std::string, std::string> last_of_;                    // layer node -> the last node fused into it
  std::map<std::string, std::shared_ptr<FakeQuantizer>> grid_;    // node -> the grid of its value
};

}  // namespace

PrepareReport prepare_graph(Graph& graph, const Backend& backend, const QConfig& qconfig) {
  return GraphPreparer(graph, backend, qconfig).run();
}

}  // namespace qat::quant
