#pragma once
// The frozen integer model on the GPU (docs/cuda.md, "Integer inference"):
// the same layers and integers as IntegerModel::forward on the CPU, every
// layer a kernel of int_forward.h (run_int_model over the CUDA executor):
// input quantization, the convolutions as implicit-im2row GEMMs on 4-way
// signed byte dot products (DP4A) with the output stage fused into the GEMM's
// epilogue, the pools, flatten and ReLU. The logits equal the CPU's bit for
// bit (the same integer arithmetic, and the same float rules at the two ends).
#include <vector>

#include "core/tensor.h"
#include "quant/integer/int_forward.h"
#include "quant/integer/integer_model.h"

namespace qat::quant {

class CudaIntegerModel {
 public:
  // Uploads every conv / linear layer's constants. Throws naming why when
  // this qat has no CUDA or no GPU is usable.
  // The model must outlive this object (it is read at every forward).
  explicit CudaIntegerModel(const IntegerModel& model);
  explicit CudaIntegerModel(IntegerModel&&) = delete;  // a temporary would dangle
  // Float images (N, C, H, W) on either device -> float logits (N, classes)
  // on the device.
  Tensor forward(const Tensor& x) const;

 private:
  const IntegerModel& model_;
  std::vector<LayerConstants> consts_;
};

#if QAT_WITH_CUDA
namespace cuda_twin {
// run_int_model on the CUDA executor (integer_model.cu); x contiguous on cuda.
Tensor integer_forward(const IntegerModel& m, const std::vector<LayerConstants>& consts, const Tensor& x);
}  // namespace cuda_twin
#endif

}  // namespace qat::quant
