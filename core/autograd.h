#pragma once
// Define-by-run autograd. Every differentiable op has one output; its Node
// holds a backward function that maps d(loss)/d(output) to one gradient per
// input (undefined where an input needs none) and the edges to the inputs'
// nodes. Leaves that require grad get an AccumulateGrad node, which adds into
// their .grad (gradients accumulate across backward calls, as in PyTorch).
// After backward without retain_graph every node frees what it saved; a
// second backward through it is an error.
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace qat {

using TensorList = std::vector<Tensor>;
using NeedGrad = std::vector<bool>;

struct Node {
  virtual ~Node() = default;
  virtual TensorList apply(const Tensor& grad_out) = 0;
  virtual void release() {}
  virtual bool released() const { return false; }
  std::string name;
  std::vector<std::shared_ptr<Node>> next;  // one per input; null = no grad needed
};

using BackwardFn = std::function<TensorList(const Tensor& grad_out, const NeedGrad& need)>;

struct FunctionNode : Node {
  TensorList apply(const Tensor& grad_out) override;
  void release() override { fn = nullptr; freed = true; }
  bool released() const override { return freed; }
  BackwardFn fn;
  NeedGrad need;
  bool freed = false;
};

struct AccumulateGrad : Node {
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf(std::move(leaf)) { name = "AccumulateGrad"; }
  TensorList apply(const Tensor& grad_out) override;
  std::shared_ptr<TensorImpl> leaf;
};

// Grad mode: thread-local on/off switch; NoGradGuard turns it off in a scope.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);

// Attaches a backward node to `out` if any input needs a gradient.
// Returns `out` (marked requires_grad when a node was attached).
Tensor record(Tensor out, const char* name, std::initializer_list<const Tensor*> inputs, BackwardFn fn);
// The same for a number of inputs known at run time (concat's).
Tensor record(Tensor out, const char* name, const std::vector<const Tensor*>& inputs, BackwardFn fn);

// A tensor saved for backward, with the storage version at save time; get()
// refuses it if an in-place op has changed it since.
class Saved {
 public:
  Saved() = default;
  explicit Saved(const Tensor& t) : t_(t.defined() ? t.detach() : t), version_(t.defined() ? t.version() : 0) {}
  const Tensor& get(const char* op) const;
  bool defined() const { return t_.defined(); }

 private:
  Tensor t_;
  uint64_t version_ = 0;
};

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Called by run_backward, on the thread that runs it, as soon as a leaf's
// gradient from this backward is complete (the last of its AccumulateGrad
// nodes has run, or was skipped for lack of a gradient), while the rest of
// the graph is still to run. A data-parallel run starts summing a layer's
// gradients over the processes from here, overlapping backward.
using GradReadyHook = std::function<void(TensorImpl* leaf)>;
// Installs `hook` on this thread for the guard's lifetime.
class GradReadyScope {
 public:
  explicit GradReadyScope(GradReadyHook hook);
  ~GradReadyScope();
  GradReadyScope(const GradReadyScope&) = delete;
  GradReadyScope& operator=(const GradReadyScope&) = delete;

 private:
  GradReadyHook prev_;
};

// True when nothing but this handle can see t's buffer (one impl reference,
// one storage reference, contiguous from offset 0). A backward function may
// then update the incoming gradient in place and return it instead of
// writing a new tensor (the engine hands each gradient to one node only).
bool exclusively_owned(const Tensor& t);

}  // namespace qat
