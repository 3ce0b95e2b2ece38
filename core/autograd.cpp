#include "core/autograd.h"

#include <unordered_map>

namespace qat {

namespace {
thread_local bool g_grad_enabled = true;
thread_local GradReadyHook g_grad_ready;
}  // namespace

GradReadyScope::GradReadyScope(GradReadyHook hook) : prev_(std::move(g_grad_ready)) { g_grad_ready = std::move(hook); }
GradReadyScope::~GradReadyScope() { g_grad_ready = std::move(prev_); }

bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

TensorList FunctionNode::apply(const Tensor& grad_out) {
  QAT_CHECK(!freed, name,
            ": backward through the graph a second time, but its saved buffers were freed; "
            "pass retain_graph=true to the first backward");
  return fn(grad_out, need);
}

bool exclusively_owned(const Tensor& t) {
  return t.defined() && t.impl_shared().use_count() == 1 && t.impl_ptr()->storage.use_count() == 1 &&
         t.is_contiguous() && t.offset() == 0;
}

TensorList AccumulateGrad::apply(const Tensor& g) {
  // The leaf's gradient is a fresh tensor owned by the leaf (never an alias of
  // a buffer some op may still use), accumulated with +=.
  if (!leaf->grad) {
    // Adopt g when nothing else can see its buffer (the common case: a fresh
    // gradient from the op's backward); otherwise copy it.
    leaf->grad = (exclusively_owned(g) ? g : g.clone()).impl_shared();
  } else {
    Tensor acc(leaf->grad);
    acc.add_(g);
  }
  return {};
}

namespace {
std::shared_ptr<Node> edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  return std::make_shared<AccumulateGrad>(t.impl_shared());
}
}  // namespace

Tensor record(Tensor out, const char* name, const std::vector<const Tensor*>& inputs, BackwardFn fn) {
  if (!g_grad_enabled) return out;
  bool any = false;
  for (const Tensor* t : inputs) any = any || (t && t->defined() && t->requires_grad());
  if (!any) return out;
  auto node = std::make_shared<FunctionNode>();
  node->name = name;
  node->fn = std::move(fn);
  for (const Tensor* t : inputs) {
    const bool need = t && t->defined() && t->requires_grad();
    node->need.push_back(need);
    node->next.push_back(need ? edge_for(*t) : nullptr);
  }
  TensorImpl* impl = out.impl_ptr();
  impl->grad_fn = std::move(node);
  impl->requires_grad = true;
  return out;
}

Tensor record(Tensor out, const char* name, std::initializer_list<const Tensor*> inputs, BackwardFn fn) {
  if (!any_requires_grad(inputs)) return out;  // (no vector for the common no-grad case)
  return record(std::move(out), name, std::vector<const Tensor*>(inputs), std::move(fn));
}

const Tensor& Saved::get(const char* op) const {
  QAT_CHECK(!t_.defined() || t_.version() == version_, op,
            ": a tensor saved for backward (shape ", t_.sizes(), ") was modified in place (version ", version_,
            " -> ", t_.version(), ")");
  return t_;
}

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  QAT_CHECK(root.requires_grad(), "backward: tensor of shape ", root.sizes(),
            " does not require grad and has no grad_fn");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    QAT_CHECK(root.numel() == 1, "backward: grad can be implicit only for a scalar output, got shape ",
              root.sizes());
    grad = Tensor::ones(root.sizes()).to(root.device());  // a loss on cuda is seeded there
  }
  QAT_CHECK(grad.sizes() == root.sizes(), "backward: gradient shape ", grad.sizes(), " does not match output ",
            root.sizes());
  NoGradGuard no_grad;

  std::shared_ptr<Node> start = root.grad_fn();
  if (!start) start = std::make_shared<AccumulateGrad>(root.impl_shared());

  // Count, for every node reachable from the root, how many edges lead into it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start.get()};
  deps[start.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next) {
      if (!e) continue;
      auto [it, inserted] = deps.try_emplace(e.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(e.get());
    }
  }

  // With a ready hook: how many AccumulateGrad nodes each leaf has here (a
  // leaf used twice has two; its gradient is complete after the last).
  std::unordered_map<TensorImpl*, int> accumulators;
  if (g_grad_ready)
    for (const auto& [n, unused] : deps)
      if (auto* acc = dynamic_cast<AccumulateGrad*>(n)) ++accumulators[acc->leaf.get()];

  // Kahn's order: a node runs once all gradients flowing into it are summed.
  // A node that received no defined gradient is skipped (its inputs get none).
  struct Pending {
    Tensor grad;
    bool owned = false;  // true once the sum lives in a buffer of our own
  };
  std::unordered_map<Node*, Pending> pending;
  pending[start.get()] = {grad, false};
  std::vector<Node*> ready{start.get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g = std::move(pending[n].grad);
    pending.erase(n);
    TensorList grads;
    if (g.defined()) grads = n->apply(g);
    for (size_t i = 0; i < n->next.size(); ++i) {
      Node* child = n->next[i].get();
      if (!child) continue;
      if (i < grads.size() && grads[i].defined()) {
        Pending& p = pending[child];
        if (!p.grad.defined()) {
          p.grad = grads[i];
        } else {
          // The first gradient may alias a buffer another node still holds.
          if (!p.owned) p.grad = p.grad.clone(), p.owned = true;
          p.grad.add_(grads[i]);
        }
      }
      if (--deps[child] == 0) ready.push_back(child);
    }
    if (!retain_graph) n->release();
    if (!accumulators.empty())
      if (auto* acc = dynamic_cast<AccumulateGrad*>(n))
        if (--accumulators[acc->leaf.get()] == 0) g_grad_ready(acc->leaf.get());
  }
}

}  // namespace qat
