#include "layers/module.h"

#include <set>

#include "core/autograd.h"

namespace qat {

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  QAT_CHECK(t.dtype() == DType::f32, type_name(), ": parameter '", name, "' must be float32");
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

Tensor& Module::register_host_buffer(const std::string& name, Tensor t) {
  QAT_CHECK(t.device() == Device::cpu, type_name(), ": host buffer '", name, "' is on ", device_name(t.device()));
  host_buffers_.insert(name);
  return register_buffer(name, std::move(t));
}

void Module::add_child(const std::string& name, ModulePtr m) {
  QAT_CHECK(m != nullptr, type_name(), ": child '", name, "' is null");
  for (auto& [n, c] : children_) QAT_CHECK(n != name, type_name(), ": child '", name, "' registered twice");
  children_.emplace_back(name, std::move(m));
}

void Module::replace_child(const std::string& name, ModulePtr m) {
  QAT_CHECK(m != nullptr, type_name(), ": replacement for child '", name, "' is null");
  for (auto& [n, c] : children_)
    if (n == name) {
      c = std::move(m);
      return;
    }
  QAT_FAIL(type_name(), ": no child named '", name, "'");
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (auto& [n, t] : params ? params_ : buffers_) out.emplace_back(prefix + n, t);
  for (auto& [n, c] : children_) c->collect(prefix + n + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [n, c] : children_)
    for (auto& [sub, m] : c->named_modules()) out.emplace_back(sub.empty() ? n : n + "." + sub, m);
  return out;
}

TensorMap Module::state_dict() const {
  TensorMap out;
  for (auto& [n, t] : named_parameters()) out[n] = t;
  for (auto& [n, t] : named_buffers()) out[n] = t;
  return out;
}

void Module::load_state_dict(const TensorMap& state, bool strict) {
  const TensorMap own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (auto& [n, t] : own) {
    auto it = state.find(n);
    if (it == state.end()) {
      missing.push_back(n);
    } else if (it->second.sizes() != t.sizes() || it->second.dtype() != t.dtype()) {
      mismatched.push_back(n + " (expected " + shape_str(t.sizes()) + " " + dtype_name(t.dtype()) + ", got " +
                           shape_str(it->second.sizes()) + " " + dtype_name(it->second.dtype()) + ")");
    }
  }
  for (auto& [n, t] : state)
    if (!own.count(n)) unexpected.push_back(n);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  const bool bad = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  QAT_CHECK(!bad, "load_state_dict (", type_name(), "): ", missing.empty() ? "" : "missing keys: " + join(missing) + "; ",
            unexpected.empty() ? "" : "unexpected keys: " + join(unexpected) + "; ",
            mismatched.empty() ? "" : "shape/dtype mismatch: " + join(mismatched));
  NoGradGuard no_grad;
  for (auto& [n, t] : own) {
    auto it = state.find(n);
    if (it != state.end()) Tensor(t).copy_(it->second);
  }
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) Tensor(t).zero_grad();
}

namespace {

// Points t's impl at a contiguous copy of its data on `device`.
void move_in_place(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return;
  TensorImpl& impl = *t.impl_ptr();
  QAT_CHECK(!impl.grad_fn, "Module::to: a parameter or buffer (shape ", t.sizes(), ") has autograd history");
  const Tensor moved = t.detach().to(device);
  impl.storage = moved.impl_ptr()->storage;
  impl.strides = moved.strides();
  impl.offset = 0;
  impl.grad.reset();
}

}  // namespace

void Module::to(Device device) {
  for (auto& [n, t] : params_) move_in_place(t, device);
  for (auto& [n, t] : buffers_)
    if (!host_buffers_.count(n)) move_in_place(t, device);
  for (auto& [n, c] : children_) c->to(device);
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::print(std::string& out, const std::string& name, int depth) const {
  out += std::string(2 * depth, ' ') + (name.empty() ? "" : "(" + name + "): ") + type_name();
  const std::string d = describe();
  if (!d.empty()) out += "(" + d + ")";
  out += "\n";
  for (auto& [n, c] : children_) c->print(out, n, depth + 1);
}

std::string Module::to_string() const {
  std::string out;
  print(out, "", 0);
  return out;
}

}  // namespace qat
