#include "apps/device_check.h"

#include "core/error.h"

namespace qat::apps {

std::vector<DeviceOpSupport> training_ops(bool cuda_built) {
  // Note [training device]: a twin counts only where it is compiled.
  return {
      {"conv2d", false},
      {"linear", false},
      {"batch_norm", false},
      {"relu", cuda_built},  // core/ops/relu.cu
      {"max_pool2d", cuda_built},                       // core/ops/pool.cu
      {"adaptive_avg_pool2d", cuda_built},              // core/ops/pool.cu
      {"dropout", cuda_built},                          // core/ops/dropout.cu
      {"cross_entropy", cuda_built},                    // core/ops/loss.cu
      {"autograd's gradient sums (add_)", cuda_built},  // core/tensor.cu
      {"SGD / AdamW updates", false},
      {"fake_quantize", cuda_built},  // quant/sim/fake_quant.cu
      {"observers' min/max", false},
      {"LSQ / LSQ+", false},
      {"INT8 training's GEMMs and gradient quantizers", false},
  };
}

std::string training_device_refusal(Device device, const cuda::DeviceInfo& info, bool built) {
  if (device == Device::cpu) return "";
  const std::string key = std::string("train.device: ") + device_name(device);
  const std::string absent = cuda::unavailable_message(key, built, info);
  if (!absent.empty()) return absent + "; use train.device: cpu";
  std::string missing, present;
  for (const DeviceOpSupport& op : training_ops(built)) {
    std::string& list = op.on_device ? present : missing;
    list += (list.empty() ? "" : ", ") + std::string(op.op);
  }
  if (missing.empty()) return "";
  return key + ": " + info.name + " is present, but the training step cannot run on it yet: " + missing +
         " have no CUDA kernels (on the GPU so far: " + (present.empty() ? "none" : present) +
         "); use train.device: cpu";
}

void check_training_device(Device device) {
  const std::string msg = training_device_refusal(device, cuda::device_info(), cuda::built());
  if (!msg.empty()) throw Error(msg);
}

}  // namespace qat::apps
