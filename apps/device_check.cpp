#include "apps/device_check.h"

#include "core/error.h"

namespace qat::apps {

std::vector<DeviceOpSupport> training_ops(bool cuda_built) {
  // Note [training device]: a twin counts only where it is compiled.
  return {
      {"conv2d", cuda_built},      // core/ops/conv2d.cu (cuDNN)
      {"linear", cuda_built},      // core/ops/linear.cu (cuBLAS)
      {"batch_norm", cuda_built},  // core/ops/batch_norm.cu (cuDNN)
      {"relu", cuda_built},  // core/ops/relu.cu
      {"max_pool2d", false},
      {"adaptive_avg_pool2d", false},
      {"dropout", false},
      {"cross_entropy", false},
      {"autograd's gradient sums (add_)", false},
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
