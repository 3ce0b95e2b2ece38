#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include <optional>
#include <set>

namespace qat {

namespace {

std::string param_key(const std::string& prefix, size_t g, size_t i) {
  return prefix + "group" + std::to_string(g) + ".param" + std::to_string(i) + ".";
}

Tensor scalar_i32(int64_t v) { return Tensor::from_vector_i32({static_cast<int32_t>(v)}, {1}); }

// One key load_state_dict expects, checked before anything is changed.
struct Expected {
  std::string key;
  DType dtype;
  Shape shape;
};

const Tensor& checked(const TensorMap& state, const Expected& e) {
  auto it = state.find(e.key);
  QAT_CHECK(it != state.end(), "Optimizer::load_state_dict: missing key '", e.key, "' (expected ",
            dtype_name(e.dtype), " ", e.shape, ")");
  const Tensor& t = it->second;
  QAT_CHECK(t.defined() && t.dtype() == e.dtype && t.sizes() == e.shape, "Optimizer::load_state_dict: key '", e.key,
            "' has ", (t.defined() ? dtype_name(t.dtype()) : "undefined"), " ", (t.defined() ? t.sizes() : Shape{}),
            ", expected ", dtype_name(e.dtype), " ", e.shape);
  return t;
}

int64_t read_i32(const Tensor& t) { return t.contiguous().data<int32_t>()[0]; }

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  state_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      QAT_CHECK(p.defined() && p.dtype() == DType::f32 && p.is_contiguous(), "Optimizer: parameter ", i,
                " of group '", groups_[g].name, "' must be a contiguous float32 tensor, got ",
                (p.defined() ? dtype_name(p.dtype()) : "undefined"), " ", (p.defined() ? p.sizes() : Shape{}));
    }
    state_[g].resize(groups_[g].params.size());
  }
  lr_scale_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) lr_scale_[g].assign(groups_[g].params.size(), 1.f);
}

void Optimizer::set_lr_scale(const Tensor& param, float scale) {
  QAT_CHECK(std::isfinite(scale) && scale >= 0.f, name(), "::set_lr_scale: scale must be finite and >= 0, got ",
            scale);
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      if (groups_[g].params[i].impl_ptr() == param.impl_ptr()) {
        lr_scale_[g][i] = scale;
        return;
      }
  QAT_FAIL(name(), "::set_lr_scale: the tensor is not one of the optimizer's parameters");
}

void Optimizer::step() {
  const size_t nbuf = buffer_names().size();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    QAT_CHECK(groups_.size() == state_.size() && group.params.size() == state_[g].size(), name(),
              "::step: the parameter groups changed shape after construction (group '", group.name, "' has ",
              group.params.size(), " params, the optimizer was built with ",
              (g < state_.size() ? state_[g].size() : 0), ")");
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor p = group.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      QAT_CHECK(grad.dtype() == DType::f32 && grad.sizes() == p.sizes() && grad.device() == p.device(), name(),
                ": gradient of parameter ", i, " of group '", group.name, "' is ", dtype_name(grad.dtype()), " ",
                grad.sizes(), " on ", device_name(grad.device()), ", expected float32 ", p.sizes(), " on ",
                device_name(p.device()));
      grad = grad.contiguous();
      ParamState& s = state_[g][i];
      if (s.buffers.size() != nbuf) {
        s.buffers.clear();
        for (size_t b = 0; b < nbuf; ++b) s.buffers.push_back(Tensor::zeros(p.sizes(), DType::f32, p.device()));
      }
      // Checked here, not by the update loops' data access, which runs in
      // parallel regions an exception must not leave (a model moved to
      // another device after its buffers were made).
      for (size_t b = 0; b < nbuf; ++b)
        QAT_CHECK(s.buffers[b].dtype() == DType::f32 && s.buffers[b].sizes() == p.sizes() &&
                      s.buffers[b].device() == p.device() && s.buffers[b].is_contiguous(),
                  name(), ": the ", buffer_names()[b], " buffer of parameter ", i, " of group '", group.name,
                  "' is ", dtype_name(s.buffers[b].dtype()), " ", s.buffers[b].sizes(), " on ",
                  device_name(s.buffers[b].device()), ", the parameter float32 ", p.sizes(), " on ",
                  device_name(p.device()), " (was the model moved to another device after training began?)");
      ++s.step;
      std::optional<ParamGroup> scaled;  // INT8 training's per-parameter lr scale, when set
      if (const float scale = lr_scale_[g][i]; scale != 1.f)
        scaled = ParamGroup{group.name, {}, group.lr * scale, group.weight_decay};
      const ParamGroup& used = scaled ? *scaled : group;
      RowUpdateHook* hook = p.device() == Device::cpu && updates_spans() ? p.update_hook() : nullptr;
      if (hook && !(p.dim() >= 1 && p.numel() > 0 && hook->begin(p))) hook = nullptr;
      if (p.device() == Device::cuda)
        update_on_device(used, p, grad, s);
      else if (hook)
        update_by_rows(used, p, grad.data<float>(), s, *hook);
      else
        update(used, p.data<float>(), grad.data<float>(), p.numel(), s);
      p.bump_version();
      if (hook) hook->end(p);
    }
  }
  ++steps_;
}

// Blocks of whole rows of about 64 kB per array, so a block the update has
// just written is still in cache when the hook reads it.
void Optimizer::update_by_rows(const ParamGroup& group, const Tensor& p, const float* g, ParamState& s,
                               RowUpdateHook& hook) {
  constexpr int64_t kBlockElements = 16384;
  const int64_t R = p.size(0), L = p.numel() / R;
  const int64_t per = std::max<int64_t>(1, kBlockElements / L);  // L >= 1: step() hooks non-empty parameters only
  const int64_t blocks = (R + per - 1) / per;
  float* data = p.data<float>();
#pragma omp parallel for schedule(static) if (p.numel() >= kOptimParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * per, r1 = std::min(R, r0 + per);
    update_span(group, data, g, r0 * L, r1 * L, s);
    hook.rows(r0, r1, data + r0 * L);
  }
}

void Optimizer::update(const ParamGroup& group, float* p, const float* g, int64_t n, ParamState& s) {
  QAT_CHECK(updates_spans(), name(), ": no update for group '", group.name, "'");
  constexpr int64_t kChunk = int64_t{1} << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kOptimParallelMin)
  for (int64_t c = 0; c < chunks; ++c) update_span(group, p, g, c * kChunk, std::min(n, (c + 1) * kChunk), s);
}

void Optimizer::update_span(const ParamGroup& group, float*, const float*, int64_t, int64_t, ParamState&) {
  QAT_FAIL(name(), ": no update of a span (group '", group.name, "')");
}

void Optimizer::update_on_device(const ParamGroup& group, const Tensor& p, const Tensor&, ParamState&) {
  QAT_FAIL(name(), ": a parameter of group '", group.name, "' (shape ", p.sizes(), ") is on ",
           device_name(p.device()), ", but ", name(), " has no update for that device; keep the model on the CPU");
}

void Optimizer::zero_grad() {
  for (ParamGroup& group : groups_)
    for (Tensor& p : group.params) p.zero_grad();
}

TensorMap Optimizer::state_dict(const std::string& prefix) const {
  const std::vector<std::string> names = buffer_names();
  TensorMap out;
  out[prefix + "steps"] = scalar_i32(steps_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    out[prefix + "group" + std::to_string(g) + ".lr"] = Tensor::from_vector({static_cast<float>(groups_[g].lr)}, {1});
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const ParamState& s = state_[g][i];
      const std::string key = param_key(prefix, g, i);
      out[key + "step"] = scalar_i32(s.step);
      if (s.step == 0) continue;
      for (size_t b = 0; b < names.size(); ++b) out[key + names[b]] = s.buffers[b].detach();
    }
  }
  return out;
}

void Optimizer::load_state_dict(const TensorMap& state, const std::string& prefix) {
  const std::vector<std::string> names = buffer_names();
  // Pass 1: check every key (and read the step counts) without changing anything.
  std::vector<Expected> expected{{prefix + "steps", DType::i32, {1}}};
  const int64_t steps = read_i32(checked(state, expected.back()));
  std::vector<std::vector<int64_t>> param_steps(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    expected.push_back({prefix + "group" + std::to_string(g) + ".lr", DType::f32, {1}});
    checked(state, expected.back());
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string key = param_key(prefix, g, i);
      expected.push_back({key + "step", DType::i32, {1}});
      const int64_t st = read_i32(checked(state, expected.back()));
      QAT_CHECK(st >= 0, "Optimizer::load_state_dict: key '", key, "step' is negative (", st, ")");
      param_steps[g].push_back(st);
      if (st == 0) continue;
      for (const std::string& b : names) {
        expected.push_back({key + b, DType::f32, groups_[g].params[i].sizes()});
        checked(state, expected.back());
      }
    }
  }
  std::set<std::string> known;
  for (const Expected& e : expected) known.insert(e.key);
  for (const auto& [key, t] : state) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    QAT_CHECK(known.count(key), "Optimizer::load_state_dict: unexpected key '", key, "' (", dtype_name(t.dtype()), " ",
              t.sizes(), ") for ", name(), " with ", groups_.size(), " groups");
  }
  // Pass 2: apply.
  steps_ = steps;
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = state.at(prefix + "group" + std::to_string(g) + ".lr").to_vector()[0];
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      ParamState& s = state_[g][i];
      s.step = param_steps[g][i];
      s.buffers.clear();
      if (s.step == 0) continue;
      const Device device = groups_[g].params[i].device();
      for (const std::string& b : names) {
        const Tensor& saved = state.at(param_key(prefix, g, i) + b);
        s.buffers.push_back(saved.device() == device ? saved.clone() : saved.to(device));  // a copy of its own
      }
    }
  }
}

std::vector<ParamGroup> make_param_groups(const std::vector<std::pair<std::string, Tensor>>& named_params, double lr,
                                          double weight_decay, bool no_decay_on_bn_and_bias) {
  ParamGroup decay{"default", {}, lr, weight_decay};
  ParamGroup no_decay{"no_decay", {}, lr, 0.0};
  for (const auto& [name, p] : named_params) {
    QAT_CHECK(p.defined(), "make_param_groups: parameter '", name, "' is undefined");
    if (!p.requires_grad()) continue;
    (no_decay_on_bn_and_bias && p.dim() <= 1 ? no_decay : decay).params.push_back(p);
  }
  std::vector<ParamGroup> groups{decay};
  if (no_decay_on_bn_and_bias) groups.push_back(no_decay);
  return groups;
}

}  // namespace qat
