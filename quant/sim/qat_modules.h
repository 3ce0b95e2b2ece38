#pragma once
// QAT modules: what prepare() swaps in for conv / conv+bn / linear patterns.
// Each holds the float weights (trained as usual), a weight FakeQuantizer,
// optionally an input quantizer (the network's first quantized layer) and an
// output quantizer (activation_post_process) unless its output stays float
// (the last layer: logits are dequantized).
//
// Note [BN folding in QAT] (docs/math/bn_folding.md, as PyTorch's ConvBn2d):
//   sf = gamma / sqrt(running_var + eps)          (per output channel)
//   y  = conv(x, FQ(w * sf)) / sf (+ conv bias)   the weight quantizer sees the
//                                                 folded weight the integer kernel will use
//   y  = batch_norm(y)  with batch statistics while training (running stats
//        update as usual), with the running statistics once BN is frozen
//        (freeze_bn_stats) or in eval — then it equals conv(x, FQ(w_fold)) + b_fold.
//   Without a conv bias, "/ sf", the batch norm and a fused ReLU / ReLU6 are
//   one op on the CPU (batch_norm_scaled: the same bits, neither the
//   unscaled nor the pre-activation tensor stored).
//   A channel with gamma ~ 0 would divide by zero; gamma is nudged to
//   +-1e-6 for the folding only (its gradient passes unchanged).
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "layers/layers.h"
#include "quant/int8_training/int8_ops.h"
#include "quant/sim/fake_quantizer.h"

namespace qat::quant {

// quant.integer_forward in eval (Note [integer eval], quant/convert/integer_eval.h):
// the integer model's layer, run on x's integers and dequantized onto the
// output grid; an undefined tensor where it does not apply now.
using IntegerEval = std::function<Tensor(const Tensor& x)>;

// Whether QAT Conv+BN layers run their output quantizer inside the batch
// norm where it can (Note [the output quantizer inside batch norm]): on by
// default; off runs it after, as its own op (the same bits: for tests and
// timings).
void set_output_quantizer_inside_bn(bool on);
bool output_quantizer_inside_bn();

// What QatConv2d and QatLinear share: the weight and its quantizers, and
// the integer forms of the weighted op (INT8 training, the integer forward,
// the integer eval), each set by its own setter.
class QatLayer : public Module {
 public:
  void set_input_quantizer(std::shared_ptr<FakeQuantizer> q);
  void set_output_quantizer(std::shared_ptr<FakeQuantizer> q);

  // INT8 training (quant/sim/int8_training.h): set, the weighted op runs on
  // the integer GEMMs, reading its input on the grid `grid` returns.
  void set_int8(std::shared_ptr<Int8GradState> state, std::function<ActGrid()> grid);
  const std::shared_ptr<Int8GradState>& int8_state() const { return int8_state_; }
  // quant.integer_forward (quant/sim/int8_training.h): the forward on the
  // integer GEMMs whenever grid() gives the input's grid (the float op when
  // it gives none); gradients as the float op's. `name` names the layer in
  // errors. INT8 training, where set, comes first.
  void set_integer_forward(std::function<std::optional<ActGrid>()> grid, std::string name);
  bool integer_forward() const { return static_cast<bool>(int_forward_grid_); }
  // Set, a forward in eval mode with no gradient returns eval(x) (where it
  // is defined) through the output quantizer, instead of the fake-quant
  // op, batch norm and activation.
  void set_integer_eval(IntegerEval eval) { int_eval_ = std::move(eval); }

  Tensor weight, bias;
  std::shared_ptr<FakeQuantizer> weight_fake_quant, input_fake_quant, activation_post_process;
  bool relu;

 protected:
  explicit QatLayer(bool relu_) : relu(relu_) {}
  // The input through the input quantizer (where the layer has one).
  Tensor quantized_input(const Tensor& x) const { return input_fake_quant ? input_fake_quant->forward(x) : x; }
  // y through the output quantizer (where the layer has one).
  Tensor quantized_output(const Tensor& y) const {
    return activation_post_process ? activation_post_process->forward(y) : y;
  }
  // The integer eval's output where it applies now (eval mode, no
  // gradient), else an undefined tensor.
  Tensor integer_eval(const Tensor& x) const;
  // The output quantizer as the output stage of the batch norm that reads
  // x, where it can be now (Note [the output quantizer inside batch norm]),
  // else null.
  std::unique_ptr<BnOutputStage> output_stage(const Tensor& x) const;

  // Which form of the weighted op runs now on the weight w, with what it
  // needs: INT8 training on the weight's integers (codes) or on its
  // fake-quantized values, the integer forward (grid set, not int8), or the
  // float op (no grid).
  struct WeightedForm {
    Tensor wq;                                // the fake-quantized weight (undefined with codes)
    std::shared_ptr<const QuantCodes> codes;  // INT8 training: the weight's integers
    std::optional<ActGrid> grid;              // the input's grid (integer forms)
    bool int8 = false;
  };
  WeightedForm weighted_form(const Tensor& w);

  std::shared_ptr<Int8GradState> int8_state_;
  std::string int_forward_name_;

 private:
  std::function<ActGrid()> int8_grid_;
  std::function<std::optional<ActGrid>()> int_forward_grid_;
  IntegerEval int_eval_;
  std::shared_ptr<QuantCodes> codes_;  // INT8 training: the weight's integers, reused across steps
};

class QatConv2d : public QatLayer {
 public:
  // bn may be null; relu fuses a ReLU after (conv or BN).
  QatConv2d(const Conv2d& conv, std::shared_ptr<BatchNorm2d> bn, bool relu, const QuantizerConfig& weight_cfg);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;
  std::string describe() const override;

  // Use the running statistics from now on (no more BN updates).
  void freeze_bn_stats() { set_bn_frozen(true); }
  bool bn_frozen() const { return bn_frozen_; }
  void set_bn_frozen(bool frozen) { bn_frozen_ = frozen; }  // (BN re-estimation unfreezes for its pass)

  // Folded float weight and bias as the integer model will see them.
  Tensor folded_weight() const;
  Tensor folded_bias() const;

  std::shared_ptr<BatchNorm2d> bn;
  Conv2dParams params;
  bool relu6 = false;  // a fused ReLU6 instead (conv+bn+relu6; graph models, not frozen yet)

 private:
  Tensor fold_scale(bool differentiable) const;
  // x conv FQ(w) (+ b): float, or on the integer GEMMs under INT8 training
  // or quant.integer_forward.
  Tensor conv(const Tensor& x, const Tensor& w, const Tensor& b);
  bool bn_frozen_ = false;
};

class QatLinear : public QatLayer {
 public:
  QatLinear(const Linear& linear, bool relu, const QuantizerConfig& weight_cfg);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return relu ? "QatLinearReLU" : "QatLinear"; }
  std::string describe() const override;
};

}  // namespace qat::quant
