#pragma once
// freeze(): a prepared QAT model (quant/sim/prepare.h) -> IntegerModel.
//
// Note [frozen qparams]
// A FakeQuantizer's `scale` / `zero_point` buffers hold exactly the qparams
// its last forward applied. freeze() reads the activations' qparams from
// them, and runs each weight quantizer once in eval mode (no observer update)
// on the folded weight, reading the integers back from the fake-quantized
// values: the integer model uses the qparams the eval-mode fake-quant model
// uses.
//
// Float arithmetic happens here, once, to derive the integer parameters
// (docs/math/requantization.md); none at inference.
// LSQ+: an offset beta gives the zero point z = -beta / s, kept as an
// integer part and a fraction: for activations (ActQuant::zero_frac) folded
// into the biases (and kept through average pooling), for weights
// (IntLayer::weight_zero_frac) a per-row term of the output stage. Interior
// outputs match fake quant; outputs of a padded conv next to the border can
// be up to 2 LSB off (the float model pads with a real 0, which is off a
// fractional grid).
#include <string>
#include <vector>

#include "layers/graph.h"
#include "layers/module.h"
#include "quant/integer/integer_model.h"

namespace qat::quant {

// A model's leaf modules in the order they run: containers (Sequential, the
// model zoo's networks) apply their children in registration order.
struct ExecStep {
  std::string name;
  Module* module;
};
std::vector<ExecStep> execution_order(Module& model);

// Puts the model in eval mode. Throws naming the module when a layer has no
// integer form (a conv/linear left in float, grouped conv, per-channel
// activations, weights wider than int8, ...).
IntegerModel freeze(Module& qat_model);

class QatConv2d;
class QatLinear;
class FakeQuantizer;
// One QAT layer's integer layer as freeze() builds it, reading its input on
// grid `in`; not finalized (IntLayer::finalize). The layer must be in eval
// mode (its weight quantizer then observes nothing). Throws naming it.
IntLayer freeze_conv(const std::string& name, QatConv2d& c, const ActQuant& in);
IntLayer freeze_linear(const std::string& name, QatLinear& c, const ActQuant& in);
// The integer grid of an activation quantizer's last forward; throws naming `where`.
ActQuant activation_grid(const FakeQuantizer& f, const std::string& where);
// A graph add node's output quantizer: its only reader, a quantizer, or a
// ReLU and its quantizer (the add / add+relu patterns); null where neither.
struct AddOutput {
  FakeQuantizer* quantizer = nullptr;
  bool relu = false;
};
AddOutput add_output(const Graph& g, const std::string& node);

}  // namespace qat::quant
