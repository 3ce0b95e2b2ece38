#include "models/checkpoint.h"

namespace qat {

namespace {
const std::string kModelPrefix = "model.";
}

void save_checkpoint(const std::string& path, const Module& model, const Optimizer* optimizer,
                     const Metadata& metadata) {
  TensorMap all;
  // A model trained on cuda is written from host copies.
  for (auto& [name, t] : model.state_dict()) all[kModelPrefix + name] = t.to(Device::cpu);
  if (optimizer)
    for (auto& [name, t] : optimizer->state_dict()) all[name] = t.to(Device::cpu);
  save_safetensors(path, all, metadata);
}

Metadata load_checkpoint(const std::string& path, Module& model, Optimizer* optimizer) {
  SafetensorsFile f = load_safetensors(path);
  TensorMap model_state;
  for (auto& [name, t] : f.tensors)
    if (name.rfind(kModelPrefix, 0) == 0) model_state[name.substr(kModelPrefix.size())] = t;
  try {
    model.load_state_dict(model_state, true);
    if (optimizer) optimizer->load_state_dict(f.tensors);
  } catch (const Error& e) {
    QAT_FAIL("checkpoint ", path, ": ", e.what());
  }
  return f.metadata;
}

}  // namespace qat
