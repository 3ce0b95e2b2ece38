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

#include "core/cuda_runtime.h"
#include "core/dtype.h"

namespace qat::apps {

// One step of training (forward, backward, update) as ops, and whether each
// has a CUDA twin in this build (core/ops/cuda_twins.h, quant/sim/cuda_twins.h).
struct DeviceOpSupport {
  const char* op;
  bool on_device;
};
std::vector<DeviceOpSupport> training_ops(bool cuda_built);

// "" when training on `device` can go ahead; else the error, which starts
// with "train.device: cuda: " and says which of (1)-(3) fails. `info` and
// `built` are cuda::device_info() and cuda::built() (parameters so that every
// branch can be tested on any machine).
std::string training_device_refusal(Device device, const cuda::DeviceInfo& info, bool built);
// Throws qat::Error with training_device_refusal(device, this machine).
void check_training_device(Device device);

}  // namespace qat::apps
