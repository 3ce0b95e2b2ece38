#pragma once
// Checks of frozen graph models shared by the freeze and integer tests.
#include <vector>

#include "core/safetensors.h"
#include "quant/convert/compare_layers.h"

namespace qat::testing {

// Two state dicts or checkpoints: the same names, each tensor the same bits.
void require_same_tensors(const TensorMap& a, const TensorMap& b);

// compare_layers of a frozen graph (Note [freezing a graph]): every layer
// exact against its node's value, and alone on the fake-quant inputs (Note
// [a layer's own differences]), the average pool's ties included (Note [a
// mean rounded onto its grid]); the logits' top-1 the same on every image.
void require_graph_layers_exact(const std::vector<quant::LayerDiff>& diffs);

}  // namespace qat::testing
