// The integer model's forward on the CUDA executor (cuda_exec.cuh).
#include "quant/integer/cuda_exec.cuh"
#include "quant/integer/integer_model_cuda.h"

namespace qat::quant::cuda_twin {

Tensor integer_forward(const IntegerModel& m, const std::vector<LayerConstants>& consts, const Tensor& x) {
  cuda_exec::CudaExec ex;
  return run_int_model(ex, m, consts, x);
}

}  // namespace qat::quant::cuda_twin
