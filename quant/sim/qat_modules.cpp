#include "quant/sim/qat_modules.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/profiler.h"

namespace qat::quant {

namespace {
int64_t channels_for(const QuantizerConfig& cfg, int64_t out_channels) {
  return cfg.spec.per_channel ? out_channels : 1;
}

// INT8 training: the weight quantizer's forward as integers (FakeQuantizer::
// forward_codes) into the layer's buffer, or null where the quantizer cannot
// give them (LSQ: the layer takes its fake-quantized output instead) or the
// weight is on the device (the CUDA twin recovers them from it). The
// buffer is reused unless a graph still holds the last step's codes.
std::shared_ptr<const QuantCodes> weight_codes(FakeQuantizer& fq, const Tensor& w, std::shared_ptr<QuantCodes>& buf,
                                               const std::string& layer) {
  if (w.device() != Device::cpu) return nullptr;  // codes are a CPU form: the fake-quantized weight on the device
  if (!buf || buf.use_count() > 1) buf = std::make_shared<QuantCodes>();
  if (!fq.forward_codes(w.contiguous(), *buf, int8_training_who(layer))) return nullptr;
  return buf;
}
}  // namespace

void QatLayer::set_input_quantizer(std::shared_ptr<FakeQuantizer> q) {
  input_fake_quant = register_module("input_fake_quant", std::move(q));
}

void QatLayer::set_output_quantizer(std::shared_ptr<FakeQuantizer> q) {
  activation_post_process = register_module("activation_post_process", std::move(q));
}

void QatLayer::set_int8(std::shared_ptr<Int8GradState> state, std::function<ActGrid()> grid) {
  int8_state_ = register_module("int8", std::move(state));
  int8_grid_ = std::move(grid);
}

void QatLayer::set_integer_forward(std::function<std::optional<ActGrid>()> grid, std::string name) {
  int_forward_grid_ = std::move(grid);
  int_forward_name_ = std::move(name);
}

namespace {
bool g_output_quantizer_inside_bn = true;
}  // namespace

void set_output_quantizer_inside_bn(bool on) { g_output_quantizer_inside_bn = on; }
bool output_quantizer_inside_bn() { return g_output_quantizer_inside_bn; }

std::unique_ptr<BnOutputStage> QatLayer::output_stage(const Tensor& x) const {
  auto* q = dynamic_cast<ObserverFakeQuantizer*>(activation_post_process.get());
  return q && g_output_quantizer_inside_bn ? q->inside_stage(x) : nullptr;
}

Tensor QatLayer::integer_eval(const Tensor& x) const {
  if (!int_eval_ || is_training() || grad_enabled()) return Tensor();
  return int_eval_(x);
}

// INT8 training comes first; the integer forward needs the weight
// fake-quantized and the input on a quantizer's grid (Note [integer forward
// of QAT layers]).
QatLayer::WeightedForm QatLayer::weighted_form(const Tensor& w) {
  WeightedForm f;
  if (!int8_state_) {
    f.wq = weight_fake_quant->forward(w);
    if (int_forward_grid_ && weight_fake_quant->fake_quant_enabled()) f.grid = int_forward_grid_();
    return f;
  }
  f.int8 = true;
  f.codes = weight_codes(*weight_fake_quant, w, codes_, int8_state_->layer());
  if (!f.codes) f.wq = weight_fake_quant->forward(w);
  f.grid = int8_grid_();
  return f;
}

QatConv2d::QatConv2d(const Conv2d& conv, std::shared_ptr<BatchNorm2d> bn_, bool relu_,
                     const QuantizerConfig& weight_cfg)
    : QatLayer(relu_), bn(std::move(bn_)), params(conv.params()) {
  weight = register_parameter("weight", conv.weight);
  if (conv.bias.defined()) bias = register_parameter("bias", conv.bias);
  if (bn) {
    QAT_CHECK(bn->channels == conv.weight.size(0), "QatConv2d: BatchNorm2d has ", bn->channels,
              " channels, the conv has ", conv.weight.size(0), " outputs");
    register_module("bn", bn);
  }
  QuantizerConfig w = weight_cfg;
  w.is_weight = true;
  weight_fake_quant = register_module("weight_fake_quant", make_fake_quantizer(w, channels_for(w, weight.size(0))));
}

std::string QatConv2d::type_name() const {
  return std::string("QatConv") + (bn ? "Bn" : "") + (relu ? "ReLU" : relu6 ? "ReLU6" : "") + "2d";
}

std::string QatConv2d::describe() const {
  return detail::cat(weight.size(1) * params.groups, "->", weight.size(0), ", k=", weight.size(2),
                     ", s=", params.stride_h, ", p=", params.pad_h);
}

// sf = gamma' / sqrt(running_var + eps), (O). gamma' is gamma nudged away
// from 0. Note [BN folding in QAT] (qat_modules.h).
Tensor QatConv2d::fold_scale(bool differentiable) const {
  const int64_t O = bn->channels;
  // O constants computed on the host, then placed where the layer lives.
  const std::vector<float> rv = bn->running_var.to_vector(), g = bn->weight.to_vector();
  std::vector<float> inv_std(O), nudge(O, 0.f);
  for (int64_t c = 0; c < O; ++c) {
    inv_std[c] = 1.f / std::sqrt(rv[c] + bn->eps);
    if (std::abs(g[c]) < 1e-6f) nudge[c] = (g[c] < 0 ? -1e-6f : 1e-6f) - g[c];
  }
  const Device device = bn->weight.device();
  Tensor gamma = differentiable ? bn->weight : bn->weight.detach();
  return mul(add(gamma, Tensor::from_vector(nudge, {O}).to(device)), Tensor::from_vector(inv_std, {O}).to(device));
}

Tensor QatConv2d::forward(const Tensor& x_in) {
  QAT_PROFILE("qat_conv2d");
  Tensor x = quantized_input(x_in);
  if (Tensor y = integer_eval(x); y.defined()) return quantized_output(y);
  Tensor y;
  if (!bn) {
    y = conv(x, weight, bias);
  } else {
    const int64_t O = weight.size(0);
    Tensor sf = fold_scale(true);
    Tensor w_fold = scale_channels(weight, sf, 0);
    y = conv(x, w_fold, Tensor());
    const Tensor unscale = div(Tensor::ones({O}).to(sf.device()), sf);
    const bool batch_stats = is_training() && !bn_frozen_;
    if (bias.defined()) {
      y = add(scale_channels(y, unscale, 1), reshape(bias, {1, O, 1, 1}));
      y = batch_norm(y, bn->weight, bn->bias, bn->running_mean, bn->running_var, batch_stats, bn->momentum, bn->eps);
    } else {  // the unscaling and the activation inside the batch norm: the same bits, two passes less
      // (core/ops/batch_norm.h)
      const BnActivation act = relu ? BnActivation::relu : relu6 ? BnActivation::relu6 : BnActivation::none;
      const std::unique_ptr<BnOutputStage> stage = output_stage(y);
      Tensor out = batch_norm_scaled(y, unscale, bn->weight, bn->bias, bn->running_mean, bn->running_var,
                                     batch_stats, bn->momentum, bn->eps, act, stage.get());
      return stage ? out : quantized_output(out);
    }
  }
  if (relu)
    y = qat::relu(y);
  else if (relu6)
    y = qat::relu6(y);
  return quantized_output(y);
}

// The float convolution, or its twins on the integer GEMMs: INT8 training,
// or the integer forward (Note [integer forward of QAT layers]).
Tensor QatConv2d::conv(const Tensor& x, const Tensor& w, const Tensor& b) {
  const WeightedForm f = weighted_form(w);
  if (f.codes) return int8_conv2d(x, *f.grid, w, f.codes, b, params, int8_state_);
  const Tensor s = weight_fake_quant->qparams().scale;
  if (f.int8) return int8_conv2d(x, *f.grid, f.wq, s, b, params, int8_state_);
  if (f.grid) return int_forward_conv2d(x, *f.grid, f.wq, s, b, params, int_forward_name_);
  return conv2d(x, f.wq, b, params);
}

Tensor QatConv2d::folded_weight() const {
  NoGradGuard ng;
  if (!bn) return weight.detach().clone();
  return scale_channels(weight.detach(), fold_scale(false), 0);
}

// b_fold = beta + (b - mean) * gamma / sqrt(var + eps)
Tensor QatConv2d::folded_bias() const {
  NoGradGuard ng;
  const int64_t O = weight.size(0);
  Tensor b = bias.defined() ? bias.detach().clone() : Tensor::zeros({O});
  if (!bn) return b;
  Tensor sf = fold_scale(false);
  return add(bn->bias.detach(), mul(sub(b, bn->running_mean), sf));
}

QatLinear::QatLinear(const Linear& linear, bool relu_, const QuantizerConfig& weight_cfg) : QatLayer(relu_) {
  weight = register_parameter("weight", linear.weight);
  if (linear.bias.defined()) bias = register_parameter("bias", linear.bias);
  QuantizerConfig w = weight_cfg;
  w.is_weight = true;
  weight_fake_quant = register_module("weight_fake_quant", make_fake_quantizer(w, channels_for(w, weight.size(0))));
}

std::string QatLinear::describe() const { return detail::cat(weight.size(1), "->", weight.size(0)); }

Tensor QatLinear::forward(const Tensor& x_in) {
  QAT_PROFILE("qat_linear");
  Tensor x = quantized_input(x_in);
  if (Tensor y = integer_eval(x); y.defined()) return quantized_output(y);
  const WeightedForm f = weighted_form(weight);
  const Tensor s = weight_fake_quant->qparams().scale;
  Tensor y = f.codes  ? int8_linear(x, *f.grid, weight, f.codes, bias, int8_state_)
             : f.int8 ? int8_linear(x, *f.grid, f.wq, s, bias, int8_state_)
             : f.grid ? int_forward_linear(x, *f.grid, f.wq, s, bias, int_forward_name_)
                      : linear(x, f.wq, bias);
  if (relu) y = qat::relu(y);
  return quantized_output(y);
}

}  // namespace qat::quant
