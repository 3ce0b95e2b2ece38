#pragma once
// freeze(): a prepared QAT model (quant/prepare.h) -> IntegerModel. Uses
// exactly the qparams the fake-quant model applies in eval mode: each weight
// quantizer is run once on the folded weight (eval: no observer update) and
// its integers are read back from the fake-quantized values; activations use
// the qparams stored in their quantizers. Float arithmetic happens here, once,
// to derive the integer parameters (REFERENCES §5); none at inference.
// Limitation: an LSQ+ offset beta (activations and weights) becomes the
// integer zero point -round(beta / s); the fake-quant model uses beta itself,
// so LSQ+ models freeze up to half an LSB off per tensor (measured: up to 4-5
// LSB per layer on a small 4-bit CNN). Exactness would need fractional zero
// points: folded into the bias for activations, a fixed-point row-sum term for
// weights; not done yet.
#include <string>
#include <vector>

#include "layers/module.h"
#include "quant/integer_model.h"

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

}  // namespace qat::quant
