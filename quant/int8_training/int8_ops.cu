// The CUDA twin of INT8 training's integer layer (int8_ops.cpp), and of the
// QAT layers' integer forward: int8_device.h on the CUDA executor.
#include "quant/integer/cuda_exec.cuh"
#include "quant/int8_training/cuda_twins.h"
#include "quant/int8_training/int8_device.h"

namespace qat::quant::cuda_twin {

Tensor int8_layer(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                  const int8_math::Geometry& g, const std::shared_ptr<Int8GradState>& state) {
  cuda_exec::CudaExec ex;
  return int8_device::int8_layer(ex, x, grid, wq, w_scale, bias, g, state);
}

Tensor int_forward_values(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                          const Tensor& bias, const int8_math::Geometry& g, const std::string& who) {
  cuda_exec::CudaExec ex;
  return int8_device::integer_forward_values(ex, x, grid, wq, w_scale, bias, g, who);
}

}  // namespace qat::quant::cuda_twin
