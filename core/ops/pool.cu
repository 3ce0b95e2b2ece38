// The CUDA twins of the pools (core/ops/pool.cpp): one thread per output
// running the per-index bodies of core/ops/pool_math.h, and backwards as
// gathers, one thread per input element (Note [pool backward as a gather]):
// the same additions in the same order as the CPU scatters, so the results
// equal the CPU op's bit for bit, with no atomics.
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"
#include "core/ops/pool_math.h"
#include "core/window.h"

namespace qat::cuda_twin {

namespace {

__global__ void max_pool_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                        int32_t* __restrict__ argmax, op_math::MaxPoolGeometry g, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) y[i] = op_math::max_pool_forward_at(i, x, g, &argmax[i]);
}

__global__ void max_pool_backward_kernel(const float* __restrict__ grad_out, const int32_t* __restrict__ argmax,
                                         float* __restrict__ dx, op_math::MaxPoolGeometry g, int64_t n) {
  QAT_GRID_STRIDE_LOOP(j, n) dx[j] = op_math::max_pool_backward_at(j, grad_out, argmax, g);
}

template <class Windows>
__global__ void window_average_kernel(const float* __restrict__ x, float* __restrict__ y, Windows windows,
                                      int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) y[i] = op_math::window_average_at(i, x, windows);
}

template <class Windows>
__global__ void window_average_backward_kernel(const float* __restrict__ grad_out, float* __restrict__ dx,
                                               Windows windows, int64_t n) {
  QAT_GRID_STRIDE_LOOP(j, n) dx[j] = op_math::window_average_backward_at(j, grad_out, windows);
}

op_math::PlaneSizes plane_sizes(const Tensor& x, int64_t OH, int64_t OW) { return {x.size(2), x.size(3), OH, OW}; }

// The average pools on the device: forward per output, backward per input.
template <class Windows>
Tensor window_average(const Tensor& x, const char* name, const char* backward_name, const Windows& windows) {
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty({x.size(0), x.size(1), windows.s.OH, windows.s.OW}, DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    window_average_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(xc.device_data<float>(),
                                                                          out.device_data<float>(), windows, n);
    QAT_CUDA_CHECK_LAUNCH(window_average_kernel);
  }
  return record(out, name, {&x}, [backward_name, in_shape = x.sizes(), windows](const Tensor& g, const NeedGrad&) {
    detail::check_gradient_device(g, Device::cuda, backward_name);
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(in_shape, DType::f32, Device::cuda);
    const int64_t m = dx.numel();
    if (m > 0) {
      window_average_backward_kernel<<<cuda::blocks_for(m), cuda::kThreadsPerBlock>>>(
          gc.device_data<float>(), dx.device_data<float>(), windows, m);
      QAT_CUDA_CHECK_LAUNCH(window_average_backward_kernel);
    }
    return TensorList{dx};
  });
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  const int64_t OH = conv_out_size(x.size(2), p.kernel_h, p.stride_h, p.pad_h, 1, "max_pool2d");
  const int64_t OW = conv_out_size(x.size(3), p.kernel_w, p.stride_w, p.pad_w, 1, "max_pool2d");
  const op_math::MaxPoolGeometry geo = op_math::max_pool_geometry(plane_sizes(x, OH, OW), p);
  const Tensor xc = x.contiguous();
  const Shape out_shape{x.size(0), x.size(1), OH, OW};
  Tensor out = Tensor::empty(out_shape, DType::f32, Device::cuda);
  Tensor argmax = Tensor::empty(out_shape, DType::i32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    max_pool_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        xc.device_data<float>(), out.device_data<float>(), argmax.device_data<int32_t>(), geo, n);
    QAT_CUDA_CHECK_LAUNCH(max_pool_forward_kernel);
  }
  return record(out, "max_pool2d", {&x}, [si = Saved(argmax), in_shape = x.sizes(), geo](const Tensor& g,
                                                                                          const NeedGrad&) {
    const Tensor& argmax = si.get("max_pool2d");
    detail::check_same_device("max_pool2d backward", {{"argmax", &argmax}, {"gradient", &g}});
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(in_shape, DType::f32, Device::cuda);
    const int64_t m = dx.numel();
    if (m > 0) {
      max_pool_backward_kernel<<<cuda::blocks_for(m), cuda::kThreadsPerBlock>>>(
          gc.device_data<float>(), argmax.device_data<int32_t>(), dx.device_data<float>(), geo, m);
      QAT_CUDA_CHECK_LAUNCH(max_pool_backward_kernel);
    }
    return TensorList{dx};
  });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p, bool count_include_pad) {
  const int64_t OH = conv_out_size(x.size(2), p.kernel_h, p.stride_h, p.pad_h, 1, "avg_pool2d");
  const int64_t OW = conv_out_size(x.size(3), p.kernel_w, p.stride_w, p.pad_w, 1, "avg_pool2d");
  return window_average(x, "avg_pool2d", "avg_pool2d backward",
                        op_math::avg_pool_windows(plane_sizes(x, OH, OW), p, count_include_pad));
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  return window_average(x, "adaptive_avg_pool2d", "adaptive_avg_pool2d backward",
                        op_math::AdaptiveAvgWindows{plane_sizes(x, out_h, out_w)});
}

}  // namespace qat::cuda_twin
