#include "quant/convert/compare_layers.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "layers/graph.h"
#include "quant/convert/freeze.h"
#include "quant/sim/avg_pool_on_grid.h"
#include "quant/sim/fake_quantizer.h"
#include "quant/sim/qat_modules.h"

namespace qat::quant {

void LayerDiff::merge(const LayerDiff& o) {
  count += o.count;
  differ += o.differ;
  max_diff = std::max(max_diff, o.max_diff);
  sum_diff += o.sum_diff;
  rows += o.rows;
  top1_agree += o.top1_agree;
  correct_reference += o.correct_reference;
  correct_integer += o.correct_integer;
  own_differ += o.own_differ;
  own_max_diff = std::max(own_max_diff, o.own_max_diff);
  own_top1_agree += o.own_top1_agree;
}

namespace {

// The grid integer q (not stored) of a fake-quant value f on grid g.
double grid_integer(float f, const ActQuant& g) {
  return std::nearbyint(static_cast<double>(f) / g.scale + g.zero_frac) + g.zero_point;
}

// Fake-quant values (float, on the layer's grid) against the integer layer's output.
LayerDiff diff_grid(const IntLayer& l, const Tensor& fq, const Tensor& stored) {
  const Tensor qi = activation_values_nchw(stored, l.out);
  const std::vector<float> f = fq.contiguous().to_vector();
  QAT_CHECK(static_cast<int64_t>(f.size()) == qi.numel(), "compare-layers: '", l.name, "': fake-quant output has ",
            f.size(), " values, the integer layer ", qi.numel());
  LayerDiff d{l.name, int_op_name(l.op)};
  const int32_t* q = qi.data<int32_t>();
  for (size_t i = 0; i < f.size(); ++i) {
    const double diff = std::abs(grid_integer(f[i], l.out) - q[i]);
    d.differ += diff != 0;
    d.max_diff = std::max(d.max_diff, diff);
    d.sum_diff += diff;
  }
  d.count = static_cast<int64_t>(f.size());
  return d;
}

LayerDiff diff_logits(const IntLayer& l, const Tensor& fq, const Tensor& logits, const Tensor& labels) {
  LayerDiff d{l.name, int_op_name(l.op), true};
  const std::vector<float> a = fq.contiguous().to_vector(), b = logits.contiguous().to_vector();
  QAT_CHECK(a.size() == b.size() && fq.dim() == 2, "compare-layers: logits shapes differ");
  const int64_t N = fq.size(0), C = fq.size(1);
  for (int64_t n = 0; n < N; ++n) {
    int64_t ia = 0, ib = 0;
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(n * C + c);
      const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
      d.differ += diff != 0;
      d.max_diff = std::max(d.max_diff, diff);
      d.sum_diff += diff;
      if (a[i] > a[static_cast<size_t>(n * C + ia)]) ia = c;
      if (b[i] > b[static_cast<size_t>(n * C + ib)]) ib = c;
    }
    d.top1_agree += ia == ib;
    if (labels.defined()) {
      d.correct_reference += ia == labels.data<int32_t>()[n];
      d.correct_integer += ib == labels.data<int32_t>()[n];
    }
  }
  d.count = N * C;
  d.rows = N;
  return d;
}

// Note [a layer's own differences]: a fake-quant value (float, on grid q)
// as the integer model stores it: q's integers (+ offset), NHWC images or
// (N, K) features, so that an integer layer can be fed it.
Tensor stored_from_values(const Tensor& fq, const ActQuant& q) {
  const Tensor c = fq.contiguous();
  const int64_t N = c.size(0), C = c.size(1), HW = c.dim() == 4 ? c.size(2) * c.size(3) : 1;
  Tensor s = Tensor::empty(c.dim() == 4 ? Shape{N, c.size(2), c.size(3), C} : Shape{N, C}, DType::u8);
  const float* f = c.data<float>();
  uint8_t* out = s.data<uint8_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t p = 0; p < HW; ++p) {
        const double v = grid_integer(f[(n * C + ch) * HW + p], q);
        out[(n * HW + p) * C + ch] = static_cast<uint8_t>(std::clamp<double>(v, q.qmin(), q.qmax()) + q.offset());
      }
  return s;
}

// Layer i alone on the fake-quant values `fq` of its inputs' layers: its
// own differences added to d.
void add_own(LayerDiff& d, const IntegerModel& im, size_t i, const std::vector<Tensor>& fq, const Tensor& want,
             const Tensor& labels) {
  const IntLayer& l = im.layers[i];
  const std::vector<int64_t> in = layer_inputs(im.layers, i);
  if (in[0] < 0) return;  // (the input quantizer reads the images themselves)
  std::vector<Tensor> stored;
  for (const int64_t p : in) stored.push_back(stored_from_values(fq[static_cast<size_t>(p)], im.layers[p].out));
  MoreInputs more;
  for (size_t k = 1; k < stored.size(); ++k) more.push_back(&stored[k]);
  const Tensor y = im.run_layer(l, stored[0], more);
  const LayerDiff own = l.dequantize ? diff_logits(l, want, y, labels) : diff_grid(l, want, y);
  d.own_differ = own.differ, d.own_max_diff = own.max_diff, d.own_top1_agree = own.top1_agree;
}

// A graph (Note [freezing a graph]): each integer layer against the value
// of the node it computes (an add's: its quantizer node's; a layer of a
// node's Sequential, as the pooling's rounding: the node's).
std::vector<LayerDiff> compare_graph_layers(Graph& g, const IntegerModel& im, const Tensor& x, const Tensor& labels) {
  const std::vector<Tensor> trace = im.forward_trace(x);
  const std::map<std::string, Tensor> v = g.node_values(x);
  std::vector<LayerDiff> out;
  std::vector<Tensor> fqs;  // each layer's fake-quant value
  for (size_t i = 0; i < im.layers.size(); ++i) {
    const IntLayer& l = im.layers[i];
    std::string node = l.op == IntOp::add || l.op == IntOp::concat ? g.readers(l.name).at(0) : l.name;
    if (!v.count(node) && node.rfind('.') != std::string::npos) node = node.substr(0, node.rfind('.'));
    QAT_CHECK(v.count(node), "compare-layers: integer layer '", l.name, "' matches no graph node");
    Tensor fq = v.at(node);
    if (int_op_def(l.op).has(kFloatInput)) {  // the quantizer on the input of the node's first layer
      FakeQuantizer* in = nullptr;
      if (auto* c = dynamic_cast<QatConv2d*>(g.module(node))) in = c->input_fake_quant.get();
      QAT_CHECK(in, "compare-layers: '", node, "' quantizes no input");
      fq = in->forward(x);
    }
    out.push_back(l.dequantize ? diff_logits(l, fq, trace[i], labels) : diff_grid(l, fq, trace[i]));
    fqs.push_back(fq);
    add_own(out.back(), im, i, fqs, fq, labels);
  }
  return out;
}

}  // namespace

namespace {
// The AvgPoolOnGrid whose first child is the pool named `pool`.
AvgPoolOnGrid& pool_on_grid(Module& model, const std::string& pool) {
  const std::string parent = pool.substr(0, pool.rfind('.'));
  for (auto& [name, m] : model.named_modules())
    if (auto* p = dynamic_cast<AvgPoolOnGrid*>(m); p && name == parent) return *p;
  throw Error("compare-layers: the average pool '" + pool + "' is not the first of an AvgPoolOnGrid");
}
}  // namespace

std::vector<LayerDiff> compare_layers(Module& qat_model, const IntegerModel& im, const Tensor& x,
                                      const Tensor& labels) {
  NoGradGuard ng;
  if (auto* g = dynamic_cast<Graph*>(&qat_model)) return compare_graph_layers(*g, im, x, labels);
  const std::vector<Tensor> trace = im.forward_trace(x);
  std::vector<LayerDiff> out;
  std::vector<Tensor> fqs;
  size_t i = 0;
  auto compare = [&](const Tensor& fq) {
    const IntLayer& l = im.layers[i];
    out.push_back(l.dequantize ? diff_logits(l, fq, trace[i], labels) : diff_grid(l, fq, trace[i]));
    fqs.push_back(fq);
    add_own(out.back(), im, i, fqs, fq, labels);
    ++i;
  };
  const std::vector<ExecStep> order = execution_order(qat_model);
  Tensor h = x;
  for (size_t s = 0; s < order.size(); ++s) {
    Module* m = order[s].module;
    FakeQuantizer* in = nullptr;
    if (auto* c = dynamic_cast<QatConv2d*>(m)) in = c->input_fake_quant.get();
    if (auto* c = dynamic_cast<QatLinear*>(m)) in = c->input_fake_quant.get();
    if (in && i < im.layers.size() && int_op_def(im.layers[i].op).has(kFloatInput)) compare(in->forward(h));
    const Tensor before = h;
    h = m->forward(h);
    if (i >= im.layers.size() || im.layers[i].name != order[s].name) continue;
    // Average pooling is rounded onto its grid by the SharedFakeQuantizer
    // that follows it, as their AvgPoolOnGrid runs them (Note [a mean
    // rounded onto its grid]).
    const bool requant_next = int_op_def(im.layers[i].op).has(kRoundsOntoInputGrid) && s + 1 < order.size() &&
                              dynamic_cast<SharedFakeQuantizer*>(order[s + 1].module);
    if (requant_next) h = pool_on_grid(qat_model, order[s].name).forward(before), ++s;
    compare(h);
  }
  QAT_CHECK(i == im.layers.size(), "compare-layers: matched ", i, " of ", im.layers.size(),
            " integer layers to the model's modules (is the integer model frozen from this model?)");
  return out;
}

}  // namespace qat::quant
