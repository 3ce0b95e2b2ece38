#pragma once
// What prepare() on a chain (prepare.cpp) and on a graph (prepare_graph.cpp)
// share: the quantizers it makes and the check of the overrides.
#include <memory>
#include <string>

#include "layers/graph.h"
#include "quant/backend.h"
#include "quant/sim/fake_quantizer.h"
#include "quant/sim/prepare.h"

namespace qat::quant {

// prepare() of a Graph: Note [prepare on graphs], prepare_graph.cpp.
PrepareReport prepare_graph(Graph& graph, const Backend& backend, const QConfig& qconfig);

namespace prepare_detail {

QuantizerConfig weight_config(const Backend& b, const QConfig& q, const std::string& layer);
// An activation quantizer with `layer`'s activation bits (Note [activation overrides]).
std::shared_ptr<FakeQuantizer> activation_quantizer(const Backend& b, const QConfig& q, const std::string& layer);
// The quantizer of the network's input, read by `layer`: an observer even
// under LSQ, a signed grid under power-of-two scales.
std::shared_ptr<FakeQuantizer> input_quantizer(const Backend& b, const QConfig& q, const std::string& layer);
// Every override names a quantized layer; throws naming them.
void check_overrides(const QConfig& q, const PrepareReport& report);

}  // namespace prepare_detail

}  // namespace qat::quant
