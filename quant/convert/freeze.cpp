#include "quant/convert/freeze.h"

#include "layers/graph.h"

#include <cmath>
#include <map>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "layers/layers.h"
#include "quant/sim/qat_modules.h"
#include "quant/integer/requant.h"

namespace qat::quant {

namespace {

bool is_leaf(Module* m) {
  return dynamic_cast<QatConv2d*>(m) || dynamic_cast<QatLinear*>(m) || dynamic_cast<FakeQuantizer*>(m) ||
         dynamic_cast<SharedFakeQuantizer*>(m) || m->children().empty();
}

void collect(Module& m, const std::string& name, std::vector<ExecStep>& out) {
  if (is_leaf(&m)) {
    out.push_back({name, &m});
    return;
  }
  for (auto& [child, c] : m.children()) collect(*c, name.empty() ? child : name + "." + child, out);
}

ActQuant activation_of(const FakeQuantizer& f, const std::string& where) {
  const QuantSpec& s = f.config().spec;
  QAT_CHECK(!s.per_channel, "freeze: '", where, "': per-channel activation quantization has no integer kernel");
  QAT_CHECK(!s.narrow_range, "freeze: '", where, "': narrow-range activations are not supported");
  const QParams q = f.qparams();
  ActQuant a{q.scale.data<float>()[0], q.zero_point.data<int32_t>()[0], 0.f, s.bits, s.is_signed};
  QAT_CHECK(std::isfinite(a.scale) && a.scale > 0, "freeze: '", where, "': activation scale ", a.scale,
            " is not a positive number (was the model ever run?)");
  // The stored qparams are the last forward's (Note [frozen qparams]): a
  // checkpoint trained under other quant settings leaves them off this grid.
  QAT_CHECK(a.zero_point >= a.qmin() && a.zero_point <= a.qmax(), "freeze: '", where, "': stored zero point ",
            a.zero_point, " is off its ", s.describe(), " grid [", a.qmin(), ", ", a.qmax(),
            "]; was the checkpoint trained with other quant settings?");
  if (f.learned_offset().defined()) {
    // LSQ+: v = s q + beta = s (q - z) with z = -beta / s, not an integer.
    const double z = -static_cast<double>(f.learned_offset().data<float>()[0]) / a.scale;
    const double zi = std::nearbyint(z);
    QAT_CHECK(zi >= a.qmin() && zi <= a.qmax(), "freeze: '", where, "': the LSQ+ offset puts the zero point (", z,
              ") outside the grid [", a.qmin(), ", ", a.qmax(), "]");
    a.zero_point = static_cast<int32_t>(zi);
    a.zero_frac = static_cast<float>(z - zi);
  }
  return a;
}

// Integer weights (Cout, ...) from the fake-quantized weight and its qparams.
void quantize_weights(IntLayer& l, const Tensor& w_float, FakeQuantizer& fq) {
  const QuantSpec& spec = fq.config().spec;
  QAT_CHECK(spec.qmin() >= -128 && spec.qmax() <= 127, "freeze: '", l.name, "': weights ", spec.describe(),
            " do not fit int8");
  const Tensor wq = fq.forward(w_float).contiguous();  // eval: the qparams of inference
  const QParams qp = fq.qparams();
  const int64_t C = w_float.size(0), per = w_float.numel() / C;
  l.weight_bits = spec.bits;
  l.weight_signed = spec.is_signed;
  l.weight_scale = Tensor::empty({C});
  l.weight_zero_point = Tensor::empty({C}, DType::i32);
  l.weight_zero_frac = Tensor::zeros({C});
  const bool pc = qp.scale.numel() > 1;
  const Tensor& beta = fq.learned_offset();
  for (int64_t c = 0; c < C; ++c) {
    l.weight_scale.data<float>()[c] = qp.scale.data<float>()[pc ? c : 0];
    l.weight_zero_point.data<int32_t>()[c] = qp.zero_point.data<int32_t>()[pc ? c : 0];
    if (!beta.defined()) continue;
    // LSQ+: w = s q + beta, zero point -beta / s split into integer + fraction
    const double z = -static_cast<double>(beta.data<float>()[pc ? c : 0]) / l.weight_scale.data<float>()[c];
    QAT_CHECK(std::nearbyint(z) == l.weight_zero_point.data<int32_t>()[c], "freeze: '", l.name,
              "': the LSQ+ weight offset of channel ", c, " puts the zero point (", z, ") outside the grid [",
              spec.qmin(), ", ", spec.qmax(), "]");
    l.weight_zero_frac.data<float>()[c] = static_cast<float>(z - std::nearbyint(z));
  }
  // wq = (q - z) s exactly as fake quant computed it; dividing by s recovers q.
  Tensor q = Tensor::empty(w_float.sizes(), DType::i8);
  for (int64_t c = 0; c < C; ++c) {
    const float s = l.weight_scale.data<float>()[c];
    const int32_t z = l.weight_zero_point.data<int32_t>()[c];
    for (int64_t k = 0; k < per; ++k) {
      const float v = std::nearbyint(wq.data<float>()[c * per + k] / s) + static_cast<float>(z);
      q.data<int8_t>()[c * per + k] = static_cast<int8_t>(std::clamp<float>(v, spec.qmin(), spec.qmax()));
    }
  }
  // conv: patches are NHWC rows
  l.weight = int_op_def(l.op).has(kConvGeometry) ? weight_ohwi_from_oihw(q) : q;
}

// Σ_k (q_w - z_w - f_w) of output channel c: what a fractional input zero
// point multiplies.
double centred_weight_sum(const IntLayer& l, int64_t c) {
  const int64_t K = l.weight.numel() / l.out_channels;
  int64_t sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += l.weight.data<int8_t>()[c * K + k];
  return static_cast<double>(sum - K * l.weight_zero_point.data<int32_t>()[c]) -
         static_cast<double>(K) * l.weight_zero_frac.data<float>()[c];
}

// Note [ReLU6 as a clamp]: the fake-quant model quantizes min(max(y, 0), 6)
// after the convolution; a quantizer is non-decreasing, so that is the
// quantized y clamped to [q(0), q(6)]: the integer conv's ReLU clamp from
// the zero point, and its upper clamp at the grid value the quantizer gives
// 6.0 (its own arithmetic: apply_frozen, the frozen qparams).
int32_t grid_value_of(const FakeQuantizer& fq, const ActQuant& a, float x) {
  NoGradGuard ng;
  const Tensor d = fq.apply_frozen(Tensor::full({1}, x)).to(Device::cpu);
  return static_cast<int32_t>(std::nearbyint(d.data<float>()[0] / a.scale + a.zero_frac)) + a.zero_point;
}

void set_output(IntLayer& l, const Tensor& b_float, FakeQuantizer* out) {
  const int64_t C = l.out_channels;
  l.dequantize = out == nullptr;
  if (!l.dequantize) l.out = activation_of(*out, l.name + ".activation_post_process");
  // Fractional zero points (LSQ+) are constants per channel: folded into the
  // float bias. Input: x = s_x (q - z - f) adds -s_x s_w f Σ(q_w - z_w);
  // output: round(y / s_y + z + f) = z + round((y + f s_y) / s_y).
  std::vector<double> bias(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double sxw = static_cast<double>(l.in.scale) * l.weight_scale.data<float>()[c];
    bias[c] = (b_float.defined() ? b_float.data<float>()[c] : 0.0) -
              sxw * l.in.zero_frac * centred_weight_sum(l, c) +
              (l.dequantize ? 0.0 : static_cast<double>(l.out.zero_frac) * l.out.scale);
  }
  l.bias = Tensor::empty({C}, DType::i32);
  for (int64_t c = 0; c < C; ++c) {
    const double sxw = static_cast<double>(l.in.scale) * l.weight_scale.data<float>()[c];
    const double b = bias[c];
    const double bq = std::nearbyint(b / sxw);
    QAT_CHECK(std::abs(bq) < 1073741824.0, "freeze: '", l.name, "': bias of channel ", c, " (", b,
              ") is out of int32 range at scale ", sxw);
    l.bias.data<int32_t>()[c] = static_cast<int32_t>(bq);
  }
  if (l.dequantize) return;
  l.multiplier = Tensor::empty({C}, DType::i32);
  l.shift = Tensor::empty({C}, DType::i32);
  l.bias_residual = Tensor::empty({C}, DType::i32);
  for (int64_t c = 0; c < C; ++c) {
    const double sxw = static_cast<double>(l.in.scale) * l.weight_scale.data<float>()[c];
    const FixedPointMultiplier f = quantize_multiplier(sxw / l.out.scale);
    l.multiplier.data<int32_t>()[c] = f.m0;
    l.shift.data<int32_t>()[c] = f.shift;
    const double frac = bias[c] / sxw - l.bias.data<int32_t>()[c];  // in [-1/2, 1/2]
    l.bias_residual.data<int32_t>()[c] = static_cast<int32_t>(std::nearbyint(frac * f.m0));
  }
}

}  // namespace

IntLayer freeze_conv(const std::string& name, QatConv2d& c, const ActQuant& in) {
  IntLayer l;
  l.op = IntOp::conv;
  l.name = name;
  l.in = in;
  l.conv = c.params;
  l.out_channels = c.weight.size(0);
  l.in_channels = c.weight.size(1) * c.params.groups;
  l.kernel_h = c.weight.size(2);
  l.kernel_w = c.weight.size(3);
  l.relu = c.relu;
  QAT_CHECK(!c.relu6 || c.activation_post_process, "freeze: conv '", name,
            "' ends in a ReLU6 without an output quantizer: the integer model clamps on the output grid");
  QAT_CHECK(c.params.groups == 1 || (c.params.groups == l.in_channels && c.params.groups == l.out_channels),
            "freeze: conv '", name, "' has groups ", c.params.groups, " (", l.in_channels, " -> ", l.out_channels,
            " channels); the integer model has dense (groups 1) and depthwise (groups = channels) kernels");
  quantize_weights(l, c.folded_weight(), *c.weight_fake_quant);
  set_output(l, c.folded_bias(), c.activation_post_process.get());
  if (c.relu6) {  // Note [ReLU6 as a clamp]
    l.relu = true;
    l.clamp_max = grid_value_of(*c.activation_post_process, l.out, 6.f);
  }
  return l;
}

IntLayer freeze_linear(const std::string& name, QatLinear& c, const ActQuant& in) {
  IntLayer l;
  l.op = IntOp::linear;
  l.name = name;
  l.in = in;
  l.out_channels = c.weight.size(0);
  l.in_channels = c.weight.size(1);
  l.relu = c.relu;
  quantize_weights(l, c.weight.detach(), *c.weight_fake_quant);
  set_output(l, c.bias.defined() ? c.bias.detach() : Tensor(), c.activation_post_process.get());
  return l;
}

ActQuant activation_grid(const FakeQuantizer& f, const std::string& where) { return activation_of(f, where); }

AddOutput add_output(const Graph& g, const std::string& node) {
  const std::vector<std::string> readers = g.readers(node);
  Module* q = readers.size() == 1 ? g.module(readers[0]) : nullptr;
  if (auto* seq = dynamic_cast<Sequential*>(q);
      seq && seq->children().size() == 2 && dynamic_cast<ReLU*>(seq->children()[0].second.get()))
    return {dynamic_cast<FakeQuantizer*>(seq->children()[1].second.get()), true};
  return {dynamic_cast<FakeQuantizer*>(q), false};
}

namespace {

struct Freezer {
  IntegerModel model;
  bool have_input = false, flat = false, done = false;
  ActQuant cur;

  void emit(IntLayer l) {
    l.finalize();
    model.layers.push_back(std::move(l));
  }
  void need_input(const std::string& name) {
    QAT_CHECK(have_input, "freeze: '", name,
              "' runs before any quantized layer; the integer model starts at the first quantized conv/linear");
  }
  void quantize_input(const std::string& name, FakeQuantizer* in) {
    if (!in) return;
    QAT_CHECK(!have_input, "freeze: '", name, "' quantizes its input again");
    IntLayer q;
    q.op = IntOp::quantize_input;
    q.name = name + ".input_fake_quant";
    q.out = cur = activation_of(*in, q.name);
    have_input = true;
    emit(std::move(q));
  }

  void conv(const std::string& name, QatConv2d& c) {
    quantize_input(name, c.input_fake_quant.get());
    need_input(name);
    QAT_CHECK(!flat, "freeze: conv '", name, "' after flatten");
    finish(freeze_conv(name, c, cur));
  }

  void linear(const std::string& name, QatLinear& c) {
    quantize_input(name, c.input_fake_quant.get());
    need_input(name);
    QAT_CHECK(flat, "freeze: linear '", name, "' needs a flattened input (add a Flatten before it)");
    finish(freeze_linear(name, c, cur));
  }

  void finish(IntLayer l) {
    done = l.dequantize;
    if (!done) cur = l.out;
    emit(std::move(l));
  }

  void same_grid(IntOp op, const std::string& name) {
    need_input(name);
    IntLayer l;
    l.op = op;
    l.name = name;
    l.in = l.out = cur;
    emit(std::move(l));
  }

  void step(const ExecStep& s) {
    Module* m = s.module;
    if (dynamic_cast<Identity*>(m) || dynamic_cast<Dropout*>(m)) return;  // identity at inference
    QAT_CHECK(!done, "freeze: '", s.name, "' (", m->type_name(),
              ") runs after the layer with the float output; the integer model ends there");
    if (auto* c = dynamic_cast<QatConv2d*>(m)) return conv(s.name, *c);
    if (auto* c = dynamic_cast<QatLinear*>(m)) return linear(s.name, *c);
    if (auto* p = dynamic_cast<MaxPool2d*>(m)) {
      QAT_CHECK(!flat, "freeze: max-pool '", s.name, "' after flatten");
      same_grid(IntOp::max_pool, s.name);
      model.layers.back().pool = p->params;
      return;
    }
    if (auto* p = dynamic_cast<AdaptiveAvgPool2d*>(m)) {
      QAT_CHECK(!flat, "freeze: adaptive avg-pool '", s.name, "' after flatten");
      need_input(s.name);
      IntLayer l;
      l.op = IntOp::adaptive_avg_pool;
      l.name = s.name;
      l.in = l.out = cur;  // the mean rounded onto the same grid, fraction included
      l.out_h = p->out_h;
      l.out_w = p->out_w;
      cur = l.out;
      emit(std::move(l));
      return;
    }
    if (auto* q = dynamic_cast<SharedFakeQuantizer*>(m)) {
      need_input(s.name);
      const QParams sq = q->source()->qparams();
      QAT_CHECK(sq.scale.data<float>()[0] == cur.scale && sq.zero_point.data<int32_t>()[0] == cur.zero_point &&
                    !model.layers.empty() && int_op_def(model.layers.back().op).has(kRoundsOntoInputGrid),
                "freeze: '", s.name, "' requantizes onto a grid other than its input's; no integer kernel for that");
      return;
    }
    if (dynamic_cast<Flatten*>(m)) {
      QAT_CHECK(!flat, "freeze: second flatten '", s.name, "'");
      same_grid(IntOp::flatten, s.name);
      flat = true;
      return;
    }
    if (dynamic_cast<ReLU*>(m)) return same_grid(IntOp::relu, s.name);
    throw Error("freeze: '" + s.name + "' (" + m->type_name() + ") has no integer kernel");
  }
};

// Note [freezing a graph]: the nodes in graph order, each node's value the
// output of an integer layer (or the float input). A module node runs the
// chain's steps (Freezer) from the grid and layout of the value it reads, and
// its first layer names that value's layer when it is not the one before. An
// add (prepare: pattern add or add+relu) is one layer with its two inputs'
// grids, its output quantizer the node that reads it: "<add>_quant", or
// Sequential(ReLU, quantizer) for add+relu; that node is the add's value.
class GraphFreezer {
 public:
  explicit GraphFreezer(Graph& g) : g_(g) {}

  IntegerModel run() {
    for (const std::string& node : g_.order()) visit(g_.node(node));
    QAT_CHECK(f_.done, "freeze: the graph does not end in a quantized conv/linear with float output");
    return std::move(f_.model);
  }

 private:
  int64_t value_of(const std::string& node) const {
    if (node == Graph::kInput) return -1;
    const auto it = value_.find(node);
    QAT_CHECK(it != value_.end(), "freeze: graph node '", node, "' has no integer value");
    return it->second;
  }

  void visit(const GraphNode& n) {
    if (consumed_.count(n.name)) return;
    if (n.op == GraphOp::add) return add(n);
    if (n.op == GraphOp::concat) return concat(n);
    const int64_t from = value_of(n.inputs[0]);
    if (from >= 0) {
      f_.cur = f_.model.layers[static_cast<size_t>(from)].out;
      f_.flat = flat_.at(from);
      f_.have_input = true;
    }
    const size_t before = f_.model.layers.size();
    std::vector<ExecStep> steps;
    collect(*g_.module(n.name), n.name, steps);
    for (const ExecStep& s : steps) f_.step(s);
    std::vector<IntLayer>& layers = f_.model.layers;
    if (layers.size() == before) {
      value_[n.name] = from;  // (identity, dropout, a fused BN or ReLU)
      return;
    }
    const size_t first = layers[before].op == IntOp::quantize_input ? before + 1 : before;
    if (from >= 0 && first < layers.size() && static_cast<int64_t>(first) != from + 1) layers[first].inputs = {from};
    value_[n.name] = static_cast<int64_t>(layers.size()) - 1;
    for (size_t i = before; i < layers.size(); ++i) flat_[static_cast<int64_t>(i)] = f_.flat;
  }

  void add(const GraphNode& n) {
    const AddOutput o = add_output(g_, n.name);
    FakeQuantizer* out = o.quantizer;
    const bool relu = o.relu;
    const std::vector<std::string> readers = g_.readers(n.name);
    QAT_CHECK(out, "freeze: graph node '", n.name,
              "' adds in float (the backend has no add pattern, or an input is float); no integer kernel for it");
    IntLayer l;
    l.op = IntOp::add;
    l.name = n.name;
    l.inputs = {value_of(n.inputs[0]), value_of(n.inputs[1])};
    for (const int64_t i : l.inputs)
      QAT_CHECK(i >= 0 && !flat_.at(i), "freeze: graph node '", n.name, "' adds the float input or flat features");
    l.in = f_.model.layers[static_cast<size_t>(l.inputs[0])].out;
    l.in2 = f_.model.layers[static_cast<size_t>(l.inputs[1])].out;
    l.out = activation_of(*out, readers[0]);
    l.relu = relu;
    emit_joined(std::move(l), n.name, readers[0]);
  }

  // Note [integer concat]: the concat and its quantizer node after it.
  void concat(const GraphNode& n) {
    const std::vector<std::string> readers = g_.readers(n.name);
    auto* out = readers.size() == 1 ? dynamic_cast<FakeQuantizer*>(g_.module(readers[0])) : nullptr;
    QAT_CHECK(out, "freeze: graph node '", n.name,
              "' concatenates in float (the backend has no concat pattern, or a branch is float); no integer kernel "
              "for it");
    IntLayer l;
    l.op = IntOp::concat;
    l.name = n.name;
    for (const std::string& in : n.inputs) {
      const int64_t i = value_of(in);
      QAT_CHECK(i >= 0 && !flat_.at(i), "freeze: graph node '", n.name, "' concatenates the float input or flat features");
      l.inputs.push_back(i);
      l.concat_in.push_back(f_.model.layers[static_cast<size_t>(i)].out);
    }
    l.out = activation_of(*out, readers[0]);
    emit_joined(std::move(l), n.name, readers[0]);
  }

  // An add or concat, and the node after it whose quantizer it includes.
  void emit_joined(IntLayer l, const std::string& node, const std::string& quantizer_node) {
    f_.emit(std::move(l));
    const int64_t at = static_cast<int64_t>(f_.model.layers.size()) - 1;
    value_[node] = value_[quantizer_node] = at;
    flat_[at] = false;
    consumed_.insert(quantizer_node);
  }

  Graph& g_;
  Freezer f_;
  std::map<std::string, int64_t> value_;  // node -> the layer whose output is its value (-1: the float input)
  std::map<int64_t, bool> flat_;          // layer -> whether its output is flat features
  std::set<std::string> consumed_;        // an add's quantizer node, frozen with it
};

}  // namespace

std::vector<ExecStep> execution_order(Module& model) {
  std::vector<ExecStep> out;
  collect(model, "", out);
  return out;
}

IntegerModel freeze(Module& qat_model) {
  qat_model.eval();
  NoGradGuard ng;
  const std::vector<ExecStep> order = execution_order(qat_model);
  for (const ExecStep& s : order)  // name the float layer, not a symptom further down
    if (dynamic_cast<Conv2d*>(s.module) || dynamic_cast<Linear*>(s.module) || dynamic_cast<BatchNorm2d*>(s.module))
      throw Error("freeze: '" + s.name + "' (" + s.module->type_name() +
                  ") was left in float (its pattern is not in the backend); the integer model needs every layer "
                  "quantized");
  if (auto* g = dynamic_cast<Graph*>(&qat_model)) return GraphFreezer(*g).run();
  Freezer f;
  for (const ExecStep& s : order) f.step(s);
  QAT_CHECK(f.done, "freeze: the model does not end in a quantized conv/linear with float output (is it prepared?)");
  return std::move(f.model);
}

}  // namespace qat::quant
