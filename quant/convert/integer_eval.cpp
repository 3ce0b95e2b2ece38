// Note [integer eval] (integer_eval.h).
#include "quant/convert/integer_eval.h"

#include "quant/convert/freeze.h"
#include "quant/integer/integer_model.h"

namespace qat::quant {

namespace {

// Whether every quantizer the layer's integer form reads applies its grid
// now (nothing observing or calibrating), with the output's qparams those
// its forward will apply.
bool quantizers_ready(FakeQuantizer& source, FakeQuantizer& weight, FakeQuantizer* out) {
  if (!source.fake_quant_enabled() || source.calibrating() || !weight.fake_quant_enabled()) return false;
  return !out || (out->fake_quant_enabled() && !out->calibrating() && out->sync_qparams());
}

// x (N, C, H, W), or (N, K) features, on grid g -> its stored integers as the
// integer layers read them: u8 NHWC, or (N, K).
Tensor stored_integers(const IntegerModel& runner, const Tensor& x, const ActQuant& g) {
  IntLayer q;
  q.op = IntOp::quantize_input;
  q.name = "integer eval input";
  q.out = g;
  q.finalize();
  if (x.dim() == 4) return runner.run_layer(q, x);
  const Tensor images = x.contiguous().view({x.size(0), x.size(1), 1, 1});
  return runner.run_layer(q, images).view({x.size(0), x.size(1)});
}

// The integer layer's stored output as float values on its grid, in the
// float model's layout: s (q - z - f) for each grid integer q.
Tensor grid_values(const Tensor& stored, const ActQuant& g) {
  const Tensor q = activation_values_nchw(stored, g);
  Tensor y = Tensor::empty(q.sizes());
  const int32_t* qi = q.data<int32_t>();
  float* o = y.data<float>();
  const double zero = static_cast<double>(g.zero_point) + g.zero_frac;
  for (int64_t i = 0; i < q.numel(); ++i) o[i] = static_cast<float>(g.scale * (qi[i] - zero));
  return y;
}

template <class L>
Tensor run_integer_eval(const std::string& name, L& layer, FakeQuantizer& source, const Tensor& x) {
  FakeQuantizer* out = layer.activation_post_process.get();
  if (x.device() != Device::cpu || !quantizers_ready(source, *layer.weight_fake_quant, out)) return Tensor();
  const ActQuant in = activation_grid(source, name + " (its input)");
  IntLayer l;
  if constexpr (std::is_same_v<L, QatConv2d>) {
    if (!out) return Tensor();  // a conv's float output: not an integer model layer's
    l = freeze_conv(name, layer, in);
  } else {
    l = freeze_linear(name, layer, in);
  }
  l.finalize();
  const IntegerModel runner;
  const Tensor y = runner.run_layer(l, stored_integers(runner, x, l.in));
  return l.dequantize ? y : grid_values(y, l.out);
}

bool applies(const FakeQuantizer& q) { return q.fake_quant_enabled() && !q.calibrating(); }

}  // namespace

Graph::AddEval make_add_eval(Graph& g, const std::string& node, const std::shared_ptr<FakeQuantizer>& a,
                             const std::shared_ptr<FakeQuantizer>& b) {
  const AddOutput o = add_output(g, node);
  FakeQuantizer* out = o.quantizer;
  const bool relu = o.relu;
  if (!out || !a || !b) return {};
  return [node, a, b, out, relu](const Tensor& xa, const Tensor& xb) -> Tensor {
    if (xa.device() != Device::cpu || !applies(*a) || !applies(*b) || !applies(*out) || !out->sync_qparams())
      return Tensor();
    IntLayer l;
    l.op = IntOp::add;
    l.name = node;
    l.in = activation_grid(*a, node + " (its first input)");
    l.in2 = activation_grid(*b, node + " (its second input)");
    l.out = activation_grid(*out, node + " (its output)");
    l.relu = relu;
    l.finalize();
    const IntegerModel runner;
    const Tensor sb = stored_integers(runner, xb, l.in2);
    return grid_values(runner.run_layer(l, stored_integers(runner, xa, l.in), {&sb}), l.out);
  };
}

IntegerEval make_integer_eval(const std::string& name, Module& layer, const std::shared_ptr<FakeQuantizer>& source) {
  if (!source) return {};
  if (auto* c = dynamic_cast<QatConv2d*>(&layer)) {
    const int64_t groups = c->params.groups, in = c->weight.size(1) * groups, out = c->weight.size(0);
    if (groups != 1 && !(groups == in && groups == out)) return {};
    return [name, c, source](const Tensor& x) { return run_integer_eval(name, *c, *source, x); };
  }
  if (auto* l = dynamic_cast<QatLinear*>(&layer))
    return [name, l, source](const Tensor& x) { return run_integer_eval(name, *l, *source, x); };
  return {};
}

}  // namespace qat::quant
