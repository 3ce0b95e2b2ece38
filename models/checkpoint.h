#pragma once
// Training checkpoints: a model's state (keys "model.<name>") and, optionally,
// an optimizer's state (keys "optim.<...>", see Note [optimizer state_dict])
// in one safetensors file, written atomically, plus free-form metadata.
#include <string>

#include "core/safetensors.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace qat {

// Whether every value of a tensor is finite (true for non-f32 dtypes; a
// device tensor is checked on a host copy).
bool all_finite(const Tensor& t);

void save_checkpoint(const std::string& path, const Module& model, const Optimizer* optimizer,
                     const Metadata& metadata = {});
// Loads into `model` (strict) and, when given, `optimizer`; returns the
// metadata. Errors name the file and the offending keys; on error the model
// and optimizer may be partly unchanged but never hold mixed-up shapes.
// optimizer_state: where no optimizer is given, receives the file's
// optimizer tensors as stored (their digest is checked all the same).
Metadata load_checkpoint(const std::string& path, Module& model, Optimizer* optimizer,
                         TensorMap* optimizer_state = nullptr);

}  // namespace qat
