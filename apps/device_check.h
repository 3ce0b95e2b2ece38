#pragma once
// train.device (--device): whether this build and this machine can train on
// the device asked for.
//
// Note [training device]: training on cuda needs (1) a CUDA build, (2) a
// usable GPU and (3) every op of the training step on the GPU. Until (3)
// holds, cuda is refused with the list of the ops that have no CUDA kernel
// yet: a run never falls back to the CPU behind the user's back, and never
// reaches a CPU op with a device tensor half-way through a step.
#include <string>
#include <vector>

#include "apps/config.h"
#include "core/cuda_runtime.h"
#include "core/dtype.h"

namespace qat::apps {

// What a run's training step does beyond FP32 training, from its config.
struct TrainingStep {
  bool quantized = false;       // fake quantization with observers (quant.enabled)
  bool learned_scales = false;  // LSQ / LSQ+
  bool int8 = false;            // INT8 training's integer GEMMs (quant.int8_training)
  bool integer_forward = false; // QAT layers' forward on the integer GEMMs (quant.integer_forward)
};
TrainingStep training_step_of(const ExperimentConfig& cfg);

// The ops of a training step (forward, backward, update), which steps use
// each, and whether each has a CUDA twin in this build (core/ops/cuda_twins.h,
// optim/cuda_twins.h, quant/sim/cuda_twins.h).
enum class UsedBy { every_step, quantized, learned_scales, int8, integer_forward };
struct DeviceOpSupport {
  const char* op;
  bool on_device;
  UsedBy used_by = UsedBy::every_step;
};
std::vector<DeviceOpSupport> training_ops(bool cuda_built);
bool step_uses(const TrainingStep& step, UsedBy used_by);

// "" when training `step` on `device` can go ahead; else the error, which
// starts with "train.device: cuda: " and says which of (1)-(3) fails, naming
// the ops this step needs that have no CUDA twin. `info` and `built` are
// cuda::device_info() and cuda::built() (parameters so that every branch can
// be tested on any machine).
std::string training_device_refusal(Device device, const cuda::DeviceInfo& info, bool built,
                                    const TrainingStep& step = {});
// Throws qat::Error with training_device_refusal(device, this machine, step).
void check_training_device(Device device, const TrainingStep& step = {});

}  // namespace qat::apps
