#pragma once
// Note [integer eval]
// quant.integer_forward promises that a QAT model computes what its frozen
// integer model computes. In training, a layer's sums are the integer GEMMs'
// (Note [integer forward of QAT layers]), but its output stage stays float:
// the folded batch norm, the bias, the activation and the output quantizer's
// rounding. The integer model requantizes the same exact sum with
// fixed-point multipliers and an int32 bias, and for about one output in a
// million the two roundings land on different grid points. One differing
// value spreads through every layer after it; through MobileNetV2's 17
// blocks a few of them moved 13 of 10,000 top-1 answers.
//
// INT8 training's layers (quant.int8_training) have the same output stage
// after their integer forward, and get the same integer eval, their
// residual adds too.
//
// In eval mode with no gradient (validation, compare-layers, `qat eval`),
// each quantized layer with an integer eval runs freeze()'s integer layer of
// itself as it is at that moment (freeze_conv / freeze_linear): its input's
// integers (exact: the input lies on its quantizer's grid), the integer
// kernel, the requantization with its ReLU / ReLU6 clamps, and the result dequantized
// onto the output grid, which the output quantizer then returns unchanged
// (its qparams first brought up to date: a learned step may have changed
// since its last forward). A graph's residual adds do the same: the float
// sum of two grid values, rounded onto the output grid, differs from the
// integer add's fixed-point result by 1 for a few values in a million
// (Note [integer add]), so in eval the add node runs the integer add. The
// average pools already round as the integer model does (Note [a mean
// rounded onto its grid]): the whole eval forward is then the integer
// model's, value for value. Training steps and their gradients do not
// change.
//
// It does not apply, and the layer's eval runs the fake-quant op, where its
// input quantizer, weight quantizer or output quantizer is not
// fake-quantizing (observing only, calibrating), or the tensor is not on the
// CPU. The price is one freeze of the layer per eval batch.
#include <memory>
#include <string>

#include "layers/graph.h"
#include "layers/module.h"
#include "quant/sim/qat_modules.h"

namespace qat::quant {

// The integer eval of QAT layer `layer` (a QatConv2d or QatLinear) named
// `name`, reading its input on source's grid; empty where there is none
// (no quantized input, a grouped convolution that is not depthwise).
IntegerEval make_integer_eval(const std::string& name, Module& layer, const std::shared_ptr<FakeQuantizer>& source);

// The integer eval of a graph's add node reading values on a's and b's
// grids: the integer model's add (Note [integer add]) onto its output
// quantizer's grid, ReLU as its lower clamp; empty where the add has no
// output quantizer (it stays float, and freeze refuses it).
Graph::AddEval make_add_eval(Graph& g, const std::string& node, const std::shared_ptr<FakeQuantizer>& a,
                             const std::shared_ptr<FakeQuantizer>& b);

}  // namespace qat::quant
