#include "apps/device_check.h"

#include "core/error.h"

namespace qat::apps {

TrainingStep training_step_of(const ExperimentConfig& cfg) {
  TrainingStep step;
  step.quantized = cfg.quant.enabled;
  step.learned_scales = cfg.quant.enabled && (cfg.quant.method == quant::QuantMethod::lsq ||
                                              cfg.quant.method == quant::QuantMethod::lsq_plus);
  step.int8 = cfg.quant.enabled && cfg.quant.int8_training.enabled;
  step.integer_forward = cfg.quant.enabled && cfg.quant.integer_forward;
  return step;
}

std::vector<DeviceOpSupport> training_ops(bool cuda_built) {
  // Note [training device]: a twin counts only where it is compiled.
  return {
      {"conv2d", cuda_built},      // core/ops/conv2d.cu (cuDNN)
      {"linear", cuda_built},      // core/ops/linear.cu (cuBLAS)
      {"batch_norm", cuda_built},  // core/ops/batch_norm.cu (cuDNN)
      {"relu, relu6, hardswish", cuda_built},  // core/ops/relu.cu
      {"max_pool2d", cuda_built},                       // core/ops/pool.cu
      {"adaptive_avg_pool2d", cuda_built},              // core/ops/pool.cu
      {"dropout", cuda_built},                          // core/ops/dropout.cu
      {"cross_entropy", cuda_built},                    // core/ops/loss.cu
      {"autograd's gradient sums (add_)", cuda_built},  // core/tensor.cu
      {"SGD / AdamW updates", cuda_built},              // optim/sgd.cu, optim/adamw.cu
      {"fake_quantize", cuda_built, UsedBy::quantized},                     // quant/sim/fake_quant.cu
      {"observers' min/max", cuda_built, UsedBy::quantized},                // quant/observe/minmax.cu
      {"Conv+BN folding (scale_channels)", cuda_built, UsedBy::quantized},  // core/ops/scale_channels.cu
      {"LSQ / LSQ+", cuda_built, UsedBy::learned_scales},                   // quant/sim/lsq.cu
      {"INT8 training's GEMMs and gradient quantizers", cuda_built, UsedBy::int8},  // quant/int8_training/int8_ops.cu
      {"the integer forward of QAT layers", cuda_built, UsedBy::integer_forward},   // quant/int8_training/int8_ops.cu
  };
}

bool step_uses(const TrainingStep& step, UsedBy used_by) {
  switch (used_by) {
    case UsedBy::every_step: return true;
    case UsedBy::quantized: return step.quantized;
    case UsedBy::learned_scales: return step.learned_scales;
    case UsedBy::int8: return step.int8;
    case UsedBy::integer_forward: return step.integer_forward;
  }
  return true;
}

std::string training_device_refusal(Device device, const cuda::DeviceInfo& info, bool built,
                                    const TrainingStep& step) {
  if (device == Device::cpu) return "";
  const std::string key = std::string("train.device: ") + device_name(device);
  const std::string absent = cuda::unavailable_message(key, built, info);
  if (!absent.empty()) return absent + "; use train.device: cpu";
  std::string missing, present;
  for (const DeviceOpSupport& op : training_ops(built)) {
    if (!step_uses(step, op.used_by)) continue;
    std::string& list = op.on_device ? present : missing;
    list += (list.empty() ? "" : ", ") + std::string(op.op);
  }
  if (missing.empty()) return "";
  return key + ": " + info.name + " is present, but this training step cannot run on it yet: " + missing +
         " have no CUDA kernels (on the GPU so far: " + (present.empty() ? "none" : present) +
         "); use train.device: cpu";
}

void check_training_device(Device device, const TrainingStep& step) {
  const std::string msg = training_device_refusal(device, cuda::device_info(), cuda::built(), step);
  if (!msg.empty()) throw Error(msg);
}

}  // namespace qat::apps
