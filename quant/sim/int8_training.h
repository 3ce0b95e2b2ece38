#pragma once
// Switching a prepared QAT model to INT8 training (Zhu et al., CVPR 2020):
// every quantized conv / linear layer, except those kept float, gets an
// Int8GradState and runs its three GEMMs on integers (quant/int8_training/int8_ops.h).
//
// Note [INT8 layer inputs]
// An INT8 layer reads its input as integers on the grid of the quantizer that
// produced it: its own input quantizer (the first layer), else the output
// quantizer of the quantized layer before it. In between, only modules that
// keep values on that grid may sit: max pooling, flatten, ReLU, identity, an
// average pool followed by its SharedFakeQuantize, and dropout, whose
// training-time factor 1/(1-p) scales the grid. The walk below follows the
// model's modules in order (sequential models: AlexNet, SmallCNN), or in a
// graph each layer's input edge back to the quantizer that wrote it (a
// layer's output quantizer, an add's or concat's quantizer node); the op
// checks every value against the grid at run time, so a model the walk
// misreads fails loudly, naming the layer, instead of training on wrong integers.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/graph.h"
#include "layers/module.h"
#include "quant/int8_training/int8_ops.h"
#include "quant/sim/qat_modules.h"

namespace qat::quant {

struct Int8Layer {
  std::string name;
  Module* layer = nullptr;
  std::shared_ptr<Int8GradState> state;
};

// Throws (naming the layer and the key) when a layer cannot be trained in
// INT8: weights that are not symmetric (zero point 0), more than 8 bits, a
// grouped convolution, no quantized input, or a keep_float name that is not
// a quantized layer. seed: the run's seed (the gradient noise derives from it).
// eval (optional): makes each layer's integer eval (Note [integer eval],
// quant/convert/integer_eval.h: make_integer_eval), set on every INT8 layer.
// add_eval (optional): on a graph, makes each add node's integer eval from
// its two inputs' quantizers (both quantized; null where it has none).
using IntegerEvalFactory =
    std::function<IntegerEval(const std::string& name, Module& layer, const std::shared_ptr<FakeQuantizer>& source)>;
using AddEvalFactory = std::function<Graph::AddEval(
    Graph& g, const std::string& node, const std::shared_ptr<FakeQuantizer>& a, const std::shared_ptr<FakeQuantizer>& b)>;
std::vector<Int8Layer> enable_int8_training(Module& model, const Int8GradConfig& cfg,
                                            const std::vector<std::string>& keep_float, uint64_t seed,
                                            const IntegerEvalFactory& eval = {}, const AddEvalFactory& add_eval = {});
// quant.integer_forward (Note [integer forward of QAT layers], int8_ops.h):
// each quantized conv / linear layer whose operands allow it computes its
// forward on the integer GEMMs whenever its input quantizer fake-quantizes
// (the float op otherwise: observing only, calibrating); its gradients stay
// QAT's. Returns every quantized layer in order, with why it stays float
// (empty: it runs on integers). Throws, naming each layer's reason, when
// none can.
// eval, add_eval (optional): as enable_int8_training's, set on the layers
// that run on integers and on the adds.
struct IntegerForwardLayer {
  std::string name;
  std::string float_because;
  bool integer_eval = false;  // its eval forward is the integer model's layer
};
std::vector<IntegerForwardLayer> enable_integer_forward(Module& model, const IntegerEvalFactory& eval = {},
                                                       const AddEvalFactory& add_eval = {});

// The INT8 layers of a model (after enable_int8_training), in order.
std::vector<Int8Layer> int8_layers(Module& model);
// The parameters an INT8 layer's lr_scale applies to: its weight and bias.
std::vector<Tensor> int8_scaled_parameters(const Int8Layer& l);

}  // namespace qat::quant
