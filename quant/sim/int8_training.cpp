#include "quant/sim/int8_training.h"

#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "layers/graph.h"
#include "layers/layers.h"
#include "quant/sim/qat_modules.h"

namespace qat::quant {

namespace {

// Calls f(layer) for a QatConv2d or QatLinear; false for anything else.
template <class F>
bool with_qat_layer(Module* m, F&& f) {
  if (auto* c = dynamic_cast<QatConv2d*>(m)) return f(*c), true;
  if (auto* l = dynamic_cast<QatLinear*>(m)) return f(*l), true;
  return false;
}

// The grid an INT8 layer reads: its source quantizer's last qparams, scaled
// by the training-time factor of the dropouts in between. Note [INT8 layer inputs].
ActGrid grid_of(const FakeQuantizer& q, const std::vector<const Dropout*>& dropouts) {
  const QParams qp = q.qparams();
  const QuantSpec& spec = q.config().spec;
  const float s = qp.scale.data<float>()[0];
  ActGrid g;
  g.levels = static_cast<int32_t>(spec.qmax() - spec.qmin() + 1);
  // x = s (q - z) = s (u - (z - qmin)) with u = q - qmin; LSQ+: x = s q + beta
  // (a parameter: on the device with the model, read by item()).
  const Tensor& beta = q.learned_offset();
  g.zero = beta.defined() ? -static_cast<double>(spec.qmin()) - static_cast<double>(beta.item()) / s
                          : static_cast<double>(qp.zero_point.data<int32_t>()[0] - spec.qmin());
  double scale = s;
  for (const Dropout* d : dropouts)
    if (d->is_training() && d->p > 0.f && d->p < 1.f) scale *= static_cast<double>(1.f / (1.f - d->p));
  g.scale = static_cast<float>(scale);
  return g;
}

// The operand rules INT8 training and the integer forward share (the
// integer GEMMs take symmetric weights of at most 8 bits, an input on one
// per-tensor grid of at most 8 bits, no groups): the first one a layer
// breaks, with what it has, for each caller to word.
struct OperandRefusal {
  enum Kind { none, weights, no_input, input, grouped } kind = none;
  int64_t bits = 0;    // weights, input: their bits
  bool flag = false;   // weights: symmetric; input: per-channel
  int64_t groups = 1;  // grouped: the layer's groups
};

template <class L>
OperandRefusal operand_refusal(const L& l, const std::shared_ptr<FakeQuantizer>& source) {
  const QuantSpec& w = l.weight_fake_quant->config().spec;
  if (!w.symmetric || w.bits > 8) return {OperandRefusal::weights, w.bits, w.symmetric};
  if (!source) return {OperandRefusal::no_input};
  const QuantSpec& a = source->config().spec;
  if (a.per_channel || a.bits > 8) return {OperandRefusal::input, a.bits, a.per_channel};
  if constexpr (std::is_same_v<L, QatConv2d>)  // dense, or depthwise (Note [INT8 training of depthwise layers])
    if (l.params.groups != 1 && !(l.weight.size(0) == l.params.groups && l.weight.size(1) == 1))
      return {OperandRefusal::grouped, 0, false, l.params.groups};
  return {};
}

template <class L>
void check_int8_layer(const L& l, const std::string& name, const std::shared_ptr<FakeQuantizer>& source) {
  const OperandRefusal r = operand_refusal(l, source);
  switch (r.kind) {
    case OperandRefusal::none: return;
    case OperandRefusal::weights:
      QAT_FAIL("quant.int8_training: layer ", name, " has ", r.bits, "-bit ", r.flag ? "symmetric" : "affine",
               " weights; INT8 training needs symmetric weights of at most 8 bits (zero point 0), or keep_float: [",
               name, "]");
    case OperandRefusal::no_input:
      QAT_FAIL("quant.int8_training: layer ", name,
               " reads no quantized input (no quantized layer or input quantizer before it); add it to keep_float");
    case OperandRefusal::input:
      QAT_FAIL("quant.int8_training: layer ", name, " reads a ", r.bits, "-bit ", r.flag ? "per-channel" : "per-tensor",
               " activation; INT8 training needs per-tensor activations of at most 8 bits");
    case OperandRefusal::grouped:
      QAT_FAIL("quant.int8_training: layer ", name, " is a grouped convolution (groups ", r.groups,
               "); add it to keep_float");
  }
}

uint64_t layer_seed(uint64_t seed, size_t index) {
  return (seed + 1) * 0xBF58476D1CE4E5B9ull + static_cast<uint64_t>(index) * 0x94D049BB133111EBull;
}

// The grid a value lies on: the quantizer that wrote it (null: float) and
// the dropouts it went through since.
struct GridSource {
  std::shared_ptr<FakeQuantizer> q;
  std::vector<const Dropout*> dropouts;
};

// A graph node's grid from its input's, through module m (not a QAT layer):
// quantizers set it, modules that keep values on their input's grid pass it,
// anything else makes the value float. Note [INT8 layer inputs].
GridSource grid_after(const ModulePtr& m, GridSource in) {
  if (auto q = std::dynamic_pointer_cast<FakeQuantizer>(m)) return {q, {}};
  if (auto* sh = dynamic_cast<SharedFakeQuantizer*>(m.get())) return {sh->source(), {}};
  if (auto* d = dynamic_cast<Dropout*>(m.get())) {
    in.dropouts.push_back(d);
    return in;
  }
  if (dynamic_cast<Sequential*>(m.get())) {  // add+relu's ReLU and quantizer; a pool and its shared quantizer
    for (const auto& child : m->children()) in = grid_after(child.second, std::move(in));
    return in;
  }
  if (dynamic_cast<Identity*>(m.get()) || dynamic_cast<MaxPool2d*>(m.get()) || dynamic_cast<Flatten*>(m.get()) ||
      dynamic_cast<ReLU*>(m.get()) || dynamic_cast<ReLU6*>(m.get()))
    return in;
  return {};
}

// walk_quantized_layers on a graph: its nodes in order, each QAT layer's
// source found along its input edge; an add or concat is float until the
// quantizer node after it.
// on_add(name, a, b): each add node, with its two inputs' quantizers (null: float).
template <class F, class A>
void walk_graph_layers(Graph& g, F&& f, A&& on_add) {
  std::map<std::string, GridSource> grid;  // node -> the grid of its value
  size_t index = 0;
  for (const std::string& name : g.order()) {
    const GraphNode& n = g.node(name);
    if (n.op == GraphOp::add) {
      const auto a = grid.find(n.inputs[0]), b = grid.find(n.inputs[1]);
      on_add(name, a == grid.end() ? nullptr : a->second.q, b == grid.end() ? nullptr : b->second.q);
    }
    if (n.op != GraphOp::module) continue;
    const auto it = grid.find(n.inputs[0]);
    const GridSource in = it == grid.end() ? GridSource{} : it->second;  // (the graph's input: float)
    GridSource out;
    const bool layer = with_qat_layer(g.module(name), [&](auto& l) {
      const bool own = l.input_fake_quant != nullptr;
      f(name, l, own ? l.input_fake_quant : in.q, own ? std::vector<const Dropout*>{} : in.dropouts, index++);
      out = {l.activation_post_process, {}};
    });
    grid[name] = layer ? out : grid_after(g.shared_module(name), in);
  }
}

// Walks the quantized layers in order (Note [INT8 layer inputs]): f(name,
// layer, source, dropouts, index) with the quantizer whose grid the layer
// reads (null: none) and the dropouts in between (none when the layer has an
// input quantizer of its own).
template <class F>
void walk_quantized_layers(Module& model, F&& f) {
  if (auto* g = dynamic_cast<Graph*>(&model))
    return walk_graph_layers(*g, f, [](const std::string&, const auto&, const auto&) {});
  std::shared_ptr<FakeQuantizer> last;  // the quantizer whose grid the next layer reads
  std::vector<const Dropout*> dropouts;
  std::string inside;  // a QAT layer's name while its children are walked
  size_t index = 0;
  // (no structured bindings: Clang 14 cannot capture them in the lambda below)
  for (auto& entry : model.named_modules()) {
    const std::string& name = entry.first;
    Module* m = entry.second;
    if (!inside.empty() && name.rfind(inside + ".", 0) == 0) continue;
    inside.clear();
    if (auto* d = dynamic_cast<Dropout*>(m)) dropouts.push_back(d);
    if (auto* sh = dynamic_cast<SharedFakeQuantizer*>(m)) {
      last = sh->source();  // re-quantized onto the source's grid: earlier dropouts no longer scale it
      dropouts.clear();
    }
    with_qat_layer(m, [&](auto& l) {
      inside = name;
      const bool own = l.input_fake_quant != nullptr;
      f(name, l, own ? l.input_fake_quant : last, own ? std::vector<const Dropout*>{} : dropouts, index);
      ++index;
      last = l.activation_post_process;
      dropouts.clear();
    });
  }
}

// Each add node of a graph whose inputs are both quantized gets add_eval's
// integer eval (none without a factory, or outside a graph).
void set_add_evals(Module& model, const AddEvalFactory& add_eval) {
  auto* g = dynamic_cast<Graph*>(&model);
  if (!g || !add_eval) return;
  walk_graph_layers(*g, [](const std::string&, auto&, const auto&, const auto&, size_t) {},
                    [&](const std::string& name, const std::shared_ptr<FakeQuantizer>& a,
                        const std::shared_ptr<FakeQuantizer>& b) {
                      if (Graph::AddEval e = a && b ? add_eval(*g, name, a, b) : Graph::AddEval())
                        g->set_add_eval(name, std::move(e));
                    });
}

}  // namespace

std::vector<Int8Layer> enable_int8_training(Module& model, const Int8GradConfig& cfg,
                                            const std::vector<std::string>& keep_float, uint64_t seed,
                                            const IntegerEvalFactory& eval, const AddEvalFactory& add_eval) {
  set_add_evals(model, add_eval);
  std::set<std::string> keep(keep_float.begin(), keep_float.end()), seen;
  std::vector<Int8Layer> out;
  walk_quantized_layers(model, [&](const std::string& name, auto& l, const std::shared_ptr<FakeQuantizer>& source,
                                   const std::vector<const Dropout*>& dropouts, size_t index) {
    seen.insert(name);
    if (keep.count(name)) return;
    check_int8_layer(l, name, source);
    auto state = std::make_shared<Int8GradState>(cfg, layer_seed(seed, index), name);
    l.set_int8(state, [source, dropouts] { return grid_of(*source, dropouts); });
    if (eval)
      if (IntegerEval e = eval(name, l, source)) l.set_integer_eval(std::move(e));
    out.push_back({name, &l, state});
  });
  for (const std::string& k : keep_float)
    QAT_CHECK(seen.count(k), "quant.int8_training.keep_float: '", k, "' is not a quantized layer of the model");
  QAT_CHECK(!out.empty(), "quant.int8_training: no layer left to train in INT8 (keep_float lists them all)");
  return out;
}

namespace {

// Why a layer's forward cannot run on integers (empty: it can): the shared
// operand rules, then the integer forward's own (int32 accumulators, no
// padding on a fractional zero point).
template <class L>
std::string integer_forward_refusal(const L& l, const std::shared_ptr<FakeQuantizer>& source) {
  const OperandRefusal r = operand_refusal(l, source);
  switch (r.kind) {
    case OperandRefusal::none: break;
    case OperandRefusal::weights: return detail::cat(r.bits, "-bit ", r.flag ? "symmetric" : "affine", " weights");
    case OperandRefusal::no_input: return "no quantized input";
    case OperandRefusal::input: return detail::cat(r.bits, "-bit ", r.flag ? "per-channel" : "per-tensor", " input");
    case OperandRefusal::grouped: return detail::cat("groups ", r.groups);
  }
  const int64_t k = l.weight.numel() / l.weight.size(0);
  if (k > (int64_t{1} << 16) || l.weight.size(0) > (int64_t{1} << 16))
    return detail::cat("K = ", k, " and ", l.weight.size(0), " outputs: more than 65536 (int32 accumulators)");
  if constexpr (std::is_same_v<L, QatConv2d>)
    if ((l.params.pad_h > 0 || l.params.pad_w > 0) && source->learned_offset().defined())
      return "padding on an LSQ+ input (a fractional zero point)";
  return {};
}

}  // namespace

std::vector<IntegerForwardLayer> enable_integer_forward(Module& model, const IntegerEvalFactory& eval,
                                                       const AddEvalFactory& add_eval) {
  set_add_evals(model, add_eval);
  std::vector<IntegerForwardLayer> out;
  walk_quantized_layers(model, [&](const std::string& name, auto& l, const std::shared_ptr<FakeQuantizer>& source,
                                   const std::vector<const Dropout*>& dropouts, size_t) {
    IntegerForwardLayer r{name, integer_forward_refusal(l, source)};
    if (eval && r.float_because.empty())
      if (IntegerEval e = eval(name, l, source)) {
        l.set_integer_eval(std::move(e));
        r.integer_eval = true;
      }
    if (r.float_because.empty()) {
      // The source's grid while it fake-quantizes; else (observing only,
      // calibrating, disabled) the float op.
      l.set_integer_forward(
          [source, dropouts]() -> std::optional<ActGrid> {
            if (!source->fake_quant_enabled()) return std::nullopt;
            return grid_of(*source, dropouts);
          },
          name);
    }
    out.push_back(std::move(r));
  });
  // Not one layer on integers would train as float QAT under another config
  // hash: refused, with each layer's reason.
  std::string why;
  for (const IntegerForwardLayer& l : out) {
    if (l.float_because.empty()) return out;
    why += (why.empty() ? "" : "; ") + l.name + ": " + l.float_because;
  }
  QAT_FAIL("quant.integer_forward: no quantized layer can run its forward on integers (",
           why.empty() ? std::string("the model has no quantized layer") : why, ")");
}

std::vector<Int8Layer> int8_layers(Module& model) {
  std::vector<Int8Layer> out;
  for (auto& entry : model.named_modules())
    with_qat_layer(entry.second, [&](auto& l) {
      if (l.int8_state()) out.push_back({entry.first, entry.second, l.int8_state()});
    });
  return out;
}

std::vector<Tensor> int8_scaled_parameters(const Int8Layer& l) {
  std::vector<Tensor> ps;
  with_qat_layer(l.layer, [&](auto& q) {
    ps.push_back(q.weight);
    if (q.bias.defined()) ps.push_back(q.bias);
  });
  return ps;
}

}  // namespace qat::quant
