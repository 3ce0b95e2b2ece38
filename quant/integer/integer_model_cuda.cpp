#include "quant/integer/integer_model_cuda.h"

#include "core/cuda_runtime.h"

namespace qat::quant {

namespace {
const IntegerModel& checked(const IntegerModel& m) {
  cuda::require("integer inference on cuda");
  return m;
}
}  // namespace

CudaIntegerModel::CudaIntegerModel(const IntegerModel& model)
    : model_(checked(model)), consts_(model_constants(model, Device::cuda)) {}

Tensor CudaIntegerModel::forward(const Tensor& x) const {
#if QAT_WITH_CUDA
  return cuda_twin::integer_forward(model_, consts_, x.to(Device::cuda).contiguous());
#else
  (void)x;
  QAT_FAIL(cuda::unavailable_message("integer inference on cuda"));
#endif
}

}  // namespace qat::quant
