// The CUDA twins of sum and mean over all elements (core/ops/shape_ops.cpp):
// CUB's device-wide reduction, each float widened to double and the sum
// rounded to float once, as the CPU op does. CUB adds in its own tree order
// (run-to-run deterministic on one GPU, per its documentation), the CPU in
// OpenMP's: both in double, so the float results differ only where the two
// double sums round to different floats. The backward fills the input's
// shape with the incoming gradient (a device scalar, read by the kernel).
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

#include "core/cuda_check.h"
#include "core/cuda_libraries.h"
#include "core/cuda_launch.h"
#include "core/cuda_runtime.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"

namespace qat::cuda_twin {

namespace {

struct WidenToDouble {
  __device__ double operator()(float v) const { return static_cast<double>(v); }
};

// out = float(sum) * factor (1 for sum; 1/n for mean, the CPU op's product).
__global__ void finish_sum_kernel(const double* __restrict__ sum, float factor, float* __restrict__ out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = static_cast<float>(sum[0]) * factor;
}

// out[i] = g * factor: the gradient of sum (factor 1) or mean (1/n).
__global__ void fill_scaled_kernel(const float* __restrict__ g, float factor, float* __restrict__ out, int64_t n) {
  const float v = g[0] * factor;
  QAT_GRID_STRIDE_LOOP(i, n) out[i] = v;
}

// The double sum of n floats into *sum (device memory).
void reduce_to_double(const float* x, int64_t n, double* sum) {
  if (n == 0) {
    cuda::memset_zero(sum, sizeof(double));
    return;
  }
  size_t temp_bytes = 0;
  QAT_CUDA_CHECK(cub::DeviceReduce::TransformReduce(nullptr, temp_bytes, x, sum, n, ::cuda::std::plus<double>{},
                                                    WidenToDouble{}, 0.0));
  // At least one byte: a null temp pointer would ask CUB for the size again.
  const cuda::DeviceBuffer temp(temp_bytes > 0 ? temp_bytes : 1);
  QAT_CUDA_CHECK(cub::DeviceReduce::TransformReduce(temp.get(), temp_bytes, x, sum, n,
                                                    ::cuda::std::plus<double>{}, WidenToDouble{}, 0.0));
}

// sum(x) * factor as a device scalar, with its backward.
Tensor scaled_sum(const Tensor& x, float factor, const char* name, const char* backward_name) {
  const Tensor xc = x.contiguous();
  const cuda::DeviceBuffer acc(sizeof(double));
  double* pacc = static_cast<double*>(acc.get());
  reduce_to_double(xc.device_data<float>(), xc.numel(), pacc);
  Tensor out = Tensor::empty({}, DType::f32, Device::cuda);
  finish_sum_kernel<<<1, 1>>>(pacc, factor, out.device_data<float>());
  QAT_CUDA_CHECK_LAUNCH(finish_sum_kernel);
  return record(out, name, {&x}, [shape = x.sizes(), factor, backward_name](const Tensor& g, const NeedGrad&) {
    detail::check_gradient_device(g, Device::cuda, backward_name);
    QAT_CHECK(g.numel() == 1, backward_name, ": expected a scalar gradient, got shape ", g.sizes());
    Tensor dx = Tensor::empty(shape, DType::f32, Device::cuda);
    const int64_t n = dx.numel();
    if (n > 0) {
      fill_scaled_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(g.device_data<float>(), factor,
                                                                         dx.device_data<float>(), n);
      QAT_CUDA_CHECK_LAUNCH(fill_scaled_kernel);
    }
    return TensorList{dx};
  });
}

}  // namespace

Tensor sum(const Tensor& x) { return scaled_sum(x, 1.f, "sum", "sum backward"); }

Tensor mean(const Tensor& x) {
  return scaled_sum(x, 1.f / static_cast<float>(x.numel()), "mean", "mean backward");
}

}  // namespace qat::cuda_twin
