#pragma once
// prepare(): turns a plain float model into a QAT model following a backend
// description, with no hand-written "quantized model" class:
//  1. in every module's children list, fuses the longest pattern the backend
//     lists (conv+bn+relu, conv+bn, conv+relu, conv, linear+relu, linear) into
//     a QatConv2d / QatLinear that takes over the float tensors; the modules
//     folded into it become Identity, so indices (and state-dict names) stay;
//  2. places activation quantizers where the integer model needs them: on the
//     input of the first quantized layer (an observer even under LSQ: see prepare.cpp), on the output of every quantized
//     layer but the last (its logits stay float), and after adaptive average
//     pooling (sharing the qparams of the layer before: the integer kernel
//     rounds onto its input's grid). Max-pool, flatten and dropout (identity
//     at inference) pass quantized values through unchanged.
// A Graph (graph models) is prepared along its edges instead (Note [prepare
// on graphs], prepare_graph.cpp). The model is changed in place; load float
// weights (init_from) before.
#include <optional>
#include <string>
#include <vector>

#include "layers/module.h"
#include "quant/backend.h"
#include "quant/sim/fake_quantizer.h"

namespace qat::quant {

struct PreparedLayer {
  std::string name;     // module name of the fused block, e.g. "features.0"
  std::string pattern;  // e.g. "conv+bn+relu"
  QuantSpec weight;
  std::optional<QuantSpec> input;   // the network input's quantizer (first layer only)
  std::optional<QuantSpec> output;  // unset: float output (the last layer)
};

// A residual add or a concat quantized as one op (graph models): its output
// quantizer, after the ReLU that follows an add where the backend fuses
// add+relu.
struct PreparedAdd {
  std::string name;     // the add or concat node, e.g. "layer1.0.add"
  std::string pattern;  // "add", "add+relu" or "concat"
  QuantSpec output;
};

struct PrepareReport {
  std::vector<PreparedLayer> layers;
  std::vector<PreparedAdd> adds;
  std::vector<std::string> float_layers;  // conv/linear (and adds) left in float (pattern not in the backend)
  std::string to_string() const;
};

PrepareReport prepare(Module& model, const Backend& backend, const QConfig& qconfig);

// Every FakeQuantizer / QAT module of a prepared model.
std::vector<FakeQuantizer*> fake_quantizers(Module& model);
// Switch observers off (qparams frozen) / BN statistics to running ones.
void disable_observers(Module& model);
void freeze_bn_stats(Module& model);

}  // namespace qat::quant
