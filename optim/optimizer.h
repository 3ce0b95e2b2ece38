#pragma once
// Optimizer base: parameter groups, per-parameter state, zero_grad and
// checkpointable state. Subclasses (SGD, AdamW) supply the per-parameter
// update as a flat loop over contiguous float32 data.
//
// Parameters are leaf tensors (f32, contiguous, on the CPU or on cuda). step()
// writes their data in place and bumps their version counter (and tells a
// CPU parameter's update hook, Note [update hooks]); a
// parameter whose .grad is undefined is skipped (and its state left alone), as
// in PyTorch.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "core/update_hook.h"

namespace qat {

struct ParamGroup {
  std::string name;
  std::vector<Tensor> params;
  double lr = 0.0;
  double weight_decay = 0.0;
};

// State of one parameter: how many updates it has received (it may be fewer
// than Optimizer::steps_taken() when it sometimes had no gradient) and the
// subclass's buffers, named by buffer_names(); the buffers are allocated
// (zeroed) on the parameter's first update.
struct ParamState {
  int64_t step = 0;
  std::vector<Tensor> buffers;
};

// Note [optimizer state_dict]
// Keys (all under `prefix`, default "optim."), every tensor of shape [1]
// except the buffers, which have the parameter's shape:
//   steps                      int32    optimizer steps taken
//   group<g>.lr                float32  the group's current lr
//   group<g>.param<i>.step     int32    updates parameter i of group g received
//   group<g>.param<i>.<buffer> float32  e.g. momentum, exp_avg, exp_avg_sq;
//                                       present only once step > 0
// The returned tensors share storage with the live state (no copy of the
// moments of a 58M-parameter model): save them before the next step().
// load_state_dict copies into the optimizer's own buffers, after checking
// every key first (nothing changes when it throws): a missing key, a shape or
// dtype mismatch, or an unexpected key under the prefix is a qat::Error naming
// the key and the shapes. Group lrs are stored as float32; updates use the lr
// rounded to float32, so a restored run continues bit-identically.
class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  void step();
  void zero_grad();
  // Mutable for lr / weight_decay (schedules); the parameter lists are fixed.
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  int64_t steps_taken() const { return steps_; }

  // Multiplies the lr of one parameter (by identity) from the next step on
  // (INT8 training's error-sensitive learning rates); 1 restores it. Not part
  // of the state dict: its owner sets it again before every step.
  void set_lr_scale(const Tensor& param, float scale);

  TensorMap state_dict(const std::string& prefix = "optim.") const;
  void load_state_dict(const TensorMap& state, const std::string& prefix = "optim.");

 protected:
  // Names of the per-parameter buffers (fixed for the optimizer's lifetime).
  virtual std::vector<std::string> buffer_names() const = 0;
  // Updates one parameter: p, g have n contiguous floats; s.step already
  // counts this update (1 on the parameter's first) and s.buffers are allocated.
  // The base runs update_span() on chunks in parallel (updates_spans() only).
  virtual void update(const ParamGroup& group, float* p, const float* g, int64_t n, ParamState& s);
  // The same for a parameter on cuda (p, g and s.buffers in device memory),
  // through the optimizer's CUDA twin; the base refuses.
  virtual void update_on_device(const ParamGroup& group, const Tensor& p, const Tensor& g, ParamState& s);
  // Optimizers whose update is element by element may also update a span
  // [begin, end) of the n elements alone (the same arithmetic per element),
  // serially, called concurrently for disjoint spans; step() then updates a
  // parameter with an update hook a block of rows at a time (Note [update hooks]).
  virtual bool updates_spans() const { return false; }
  virtual void update_span(const ParamGroup& group, float* p, const float* g, int64_t begin, int64_t end,
                           ParamState& s);
  virtual const char* name() const = 0;

 private:
  void update_by_rows(const ParamGroup& group, const Tensor& p, const float* g, ParamState& s, RowUpdateHook& hook);
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // [group][param]
  std::vector<std::vector<float>> lr_scale_;    // [group][param]
  int64_t steps_ = 0;
};

// An optimizer whose rule is element by element (SGD, AdamW), with its own
// hyperparameters beyond the groups' (Options): the base runs spans of it on
// the threads, and an update hook gets the rows as they are done.
template <class Options>
class ElementwiseOptimizer : public Optimizer {
 public:
  const Options& options() const { return opt_; }

 protected:
  ElementwiseOptimizer(std::vector<ParamGroup> groups, const Options& options)
      : Optimizer(std::move(groups)), opt_(options) {}
  bool updates_spans() const override { return true; }

  Options opt_;
};

// Groups for an optimizer from a module's named parameters (those that do not
// require grad are left out). Without the flag: one group "default". With it:
// group 0 "default" holds the parameters with dim() >= 2 (weights) and group 1
// "no_decay" (weight_decay 0) those with dim() <= 1 (biases, BN weight/bias);
// both groups exist even if one is empty, so state keys stay stable.
std::vector<ParamGroup> make_param_groups(const std::vector<std::pair<std::string, Tensor>>& named_params, double lr,
                                          double weight_decay, bool no_decay_on_bn_and_bias);

// Loops at least this long run in parallel (OpenMP) in the update kernels.
inline constexpr int64_t kOptimParallelMin = 1 << 15;

}  // namespace qat
