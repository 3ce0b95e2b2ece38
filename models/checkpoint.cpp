#include "models/checkpoint.h"

#include <cmath>
#include <set>

namespace qat {

namespace {
const std::string kModelPrefix = "model.";
const std::string kOptimizerPrefix = "optim.";  // (Optimizer::state_dict's default prefix)

// Whether a loaded tensor must hold finite values: every parameter, and the
// buffers that are never legitimately NaN or infinite (batch-norm statistics,
// quantizer scales). Observer min/max start at +-inf and are not checked.
bool must_be_finite(const std::string& name, const std::set<std::string>& parameters) {
  if (parameters.count(name)) return true;
  const auto dot = name.rfind('.');
  const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
  return last == "running_mean" || last == "running_var" || last == "scale";
}

// The first non-finite value of an f32 tensor: its index, or -1.
int64_t first_non_finite(const Tensor& t) {
  if (all_finite(t)) return -1;
  const Tensor c = t.contiguous();
  const float* p = c.data<float>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

// A checkpoint whose weights hold NaN or an infinity (a diverged run saved by
// an older qat, a flipped bit) is refused before anything uses it.
void check_finite(const std::string& path, const TensorMap& state, const Module& model) {
  std::set<std::string> parameters;
  for (const auto& [name, t] : model.named_parameters()) parameters.insert(name);
  for (const auto& [name, t] : state) {
    if (!must_be_finite(name, parameters)) continue;
    const int64_t i = first_non_finite(t);
    if (i < 0) continue;
    const float v = t.contiguous().data<float>()[i];
    QAT_FAIL("checkpoint ", path, ": tensor '", kModelPrefix, name, "' holds ", v, " at element ", i, " of ",
             t.numel(), "; a model with non-finite weights, statistics or scales is not loaded");
  }
}
}  // namespace

bool all_finite(const Tensor& t) {
  if (t.dtype() != DType::f32) return true;
  const Tensor c = t.to(Device::cpu).contiguous();  // a model trained on cuda is checked on host copies
  const float* p = c.data<float>();
  const int64_t n = c.numel();
  int64_t bad = 0;
  // x - x is 0 for every finite x and NaN for NaN or +-inf.
#pragma omp parallel for reduction(+ : bad) if (n > (int64_t{1} << 20))
  for (int64_t i = 0; i < n; ++i) bad += !(p[i] - p[i] == 0.f);
  return bad == 0;
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

Metadata load_checkpoint(const std::string& path, Module& model, Optimizer* optimizer, TensorMap* optimizer_state) {
  SafetensorsFile f = load_safetensors(path);
  TensorMap model_state;
  for (auto& [name, t] : f.tensors) {
    if (name.rfind(kModelPrefix, 0) == 0) model_state[name.substr(kModelPrefix.size())] = t;
    else if (!optimizer && optimizer_state && name.rfind(kOptimizerPrefix, 0) == 0) (*optimizer_state)[name] = t;
  }
  check_finite(path, model_state, model);
  try {
    model.load_state_dict(model_state, true);
    if (optimizer) optimizer->load_state_dict(f.tensors);
  } catch (const Error& e) {
    QAT_FAIL("checkpoint ", path, ": ", e.what());
  }
  return f.metadata;
}

}  // namespace qat
