#pragma once
// Module: the base of every layer and model. It owns named parameters
// (trainable tensors), buffers (state such as BN running statistics) and
// child modules, all in registration order. Full names join the path with
// dots, as PyTorch does ("features.0.weight"), so state dicts line up with
// torchvision's.
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace qat {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // Short type name for printing ("Conv2d", "Sequential", ...).
  virtual std::string type_name() const = 0;
  // One line describing the layer's settings, e.g. "3->64, k=11, s=4, p=2".
  virtual std::string describe() const { return ""; }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  NamedTensors named_parameters() const;  // recursive, full names
  NamedTensors named_buffers() const;     // recursive, full names
  std::vector<Tensor> parameters() const;
  // Direct children in registration order (name, module).
  const std::vector<std::pair<std::string, ModulePtr>>& children() const { return children_; }
  // Every module with its full name ("" for this one), depth first, pre-order.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Replaces the child registered as `name` (used by graph rewrites such as prepare()).
  void replace_child(const std::string& name, ModulePtr m);

  // Parameters and buffers by full name (copies of the handles, sharing data).
  TensorMap state_dict() const;
  // Copies values into this module's tensors. strict: every key must match;
  // otherwise missing/unexpected keys are allowed. Shape and dtype mismatches
  // always fail. The error lists every missing, unexpected and mismatched key.
  void load_state_dict(const TensorMap& state, bool strict = true);

  void zero_grad();
  // Moves every parameter and buffer (but the host buffers) to `device` in
  // place: each tensor keeps its identity, so handles held elsewhere (an
  // optimizer's, a layer's own members) see the moved data. Gradients are
  // dropped. No autograd history.
  void to(Device device);
  int64_t num_parameters() const;
  // Indented tree of the module with each layer's description.
  std::string to_string() const;

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  // A buffer that stays on the CPU when the module moves (to()): control
  // state that host code reads and writes every step (a quantizer's flags,
  // qparams and observed ranges), a few numbers, saved like any buffer.
  Tensor& register_host_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  bool training_ = true;

 private:
  void add_child(const std::string& name, ModulePtr m);
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  void print(std::string& out, const std::string& name, int depth) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::set<std::string> host_buffers_;  // names in buffers_ that to() leaves on the CPU
  std::vector<std::pair<std::string, ModulePtr>> children_;
};

}  // namespace qat
