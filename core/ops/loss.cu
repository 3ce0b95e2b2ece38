// The CUDA twins of the losses (core/ops/loss.cpp): the per-row and
// per-element bodies of core/ops/loss_math.h, one thread per row (Note [loss
// on the device]) and the batch mean in row order on one thread, so the
// device adds what the CPU adds in the CPU's order; exp and log are CUDA's.
// The incoming gradient of a loss is a device scalar, read by the kernels
// (no copy to the host).
#include "core/cuda_check.h"
#include "core/cuda_libraries.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "core/ops/cuda_twins.h"
#include "core/ops/loss_math.h"

namespace qat::cuda_twin {

namespace {

__global__ void log_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t c) {
  QAT_GRID_STRIDE_LOOP(row, n) op_math::log_softmax_row(x + row * c, c, y + row * c);
}

__global__ void log_softmax_backward_kernel(const float* __restrict__ y, const float* __restrict__ g,
                                            float* __restrict__ dx, int64_t n, int64_t c) {
  QAT_GRID_STRIDE_LOOP(row, n) op_math::log_softmax_backward_row(y + row * c, g + row * c, c, dx + row * c);
}

// One thread: the CPU's order.
__global__ void nll_loss_kernel(const float* __restrict__ logp, const int32_t* __restrict__ target, int64_t n,
                                int64_t c, float* __restrict__ out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = op_math::nll_loss_value(logp, target, n, c);
}

__global__ void nll_loss_backward_kernel(const int32_t* __restrict__ target, const float* __restrict__ g,
                                         float* __restrict__ dx, int64_t n, int64_t c) {
  const float gv = g[0];
  QAT_GRID_STRIDE_LOOP(i, n * c) dx[i] = op_math::nll_loss_grad_at(i, target, n, c, gv);
}

__global__ void cross_entropy_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ target,
                                          float* __restrict__ logp, double* __restrict__ rows, int64_t n, int64_t c,
                                          float on, float off) {
  QAT_GRID_STRIDE_LOOP(row, n) {
    op_math::log_softmax_row(x + row * c, c, logp + row * c);
    rows[row] = op_math::cross_entropy_row(logp + row * c, c, target[row], on, off);
  }
}

// One thread: the rows summed in the CPU's order.
__global__ void mean_in_order_kernel(const double* __restrict__ rows, int64_t n, float* __restrict__ out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = op_math::mean_in_order(rows, n);
}

__global__ void cross_entropy_backward_kernel(const float* __restrict__ logp, const int32_t* __restrict__ target,
                                              const float* __restrict__ g, float* __restrict__ dx, int64_t n,
                                              int64_t c, float on, float off) {
  const float gv = g[0];
  QAT_GRID_STRIDE_LOOP(i, n * c) dx[i] = op_math::cross_entropy_grad_at(i, logp, target, n, c, on, off, gv);
}

// A device scalar for a loss's value.
Tensor device_scalar() { return Tensor::empty({}, DType::f32, Device::cuda); }

// The loss's incoming gradient: one value on the device.
const float* scalar_gradient(const Tensor& g, const char* backward) {
  detail::check_gradient_device(g, Device::cuda, backward);
  QAT_CHECK(g.numel() == 1, backward, ": expected a scalar gradient, got shape ", g.sizes());
  return g.device_data<float>();
}

}  // namespace

Tensor log_softmax(const Tensor& x) {
  const Tensor xc = x.contiguous();
  const int64_t n = x.size(0), c = x.size(1);
  Tensor out = Tensor::empty({n, c}, DType::f32, Device::cuda);
  if (n > 0) {
    log_softmax_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(xc.device_data<float>(),
                                                                       out.device_data<float>(), n, c);
    QAT_CUDA_CHECK_LAUNCH(log_softmax_kernel);
  }
  return record(out, "log_softmax", {&x}, [sy = Saved(out)](const Tensor& g, const NeedGrad&) {
    const Tensor& y = sy.get("log_softmax");
    detail::check_same_device("log_softmax backward", {{"output", &y}, {"gradient", &g}});
    const Tensor gc = g.contiguous();
    const int64_t n = y.size(0), c = y.size(1);
    Tensor dx = Tensor::empty({n, c}, DType::f32, Device::cuda);
    if (n > 0) {
      log_softmax_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
          y.device_data<float>(), gc.device_data<float>(), dx.device_data<float>(), n, c);
      QAT_CUDA_CHECK_LAUNCH(log_softmax_backward_kernel);
    }
    return TensorList{dx};
  });
}

Tensor nll_loss(const Tensor& logp, const Tensor& target) {
  const Tensor lc = logp.contiguous(), tc = target.contiguous();
  const int64_t n = logp.size(0), c = logp.size(1);
  Tensor out = device_scalar();
  nll_loss_kernel<<<1, 1>>>(lc.device_data<float>(), tc.device_data<int32_t>(), n, c, out.device_data<float>());
  QAT_CUDA_CHECK_LAUNCH(nll_loss_kernel);
  return record(out, "nll_loss", {&logp}, [st = Saved(tc), n, c](const Tensor& g, const NeedGrad&) {
    const float* gv = scalar_gradient(g, "nll_loss backward");
    const Tensor& t = st.get("nll_loss");
    Tensor dx = Tensor::empty({n, c}, DType::f32, Device::cuda);
    if (n > 0) {
      nll_loss_backward_kernel<<<cuda::blocks_for(n * c), cuda::kThreadsPerBlock>>>(
          t.device_data<int32_t>(), gv, dx.device_data<float>(), n, c);
      QAT_CUDA_CHECK_LAUNCH(nll_loss_backward_kernel);
    }
    return TensorList{dx};
  });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, float label_smoothing) {
  const Tensor xc = logits.contiguous(), tc = target.contiguous();
  const int64_t n = logits.size(0), c = logits.size(1);
  const float eps = label_smoothing, on = 1.f - eps, off = eps / static_cast<float>(c);
  Tensor logp = Tensor::empty({n, c}, DType::f32, Device::cuda);
  // The rows' losses in double (qat has no float64 dtype): scratch from the caching allocator.
  const cuda::DeviceBuffer rows(static_cast<size_t>(n) * sizeof(double));
  double* prows = static_cast<double*>(rows.get());
  if (n > 0) {
    cross_entropy_rows_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        xc.device_data<float>(), tc.device_data<int32_t>(), logp.device_data<float>(), prows, n, c, on, off);
    QAT_CUDA_CHECK_LAUNCH(cross_entropy_rows_kernel);
  }
  Tensor out = device_scalar();
  mean_in_order_kernel<<<1, 1>>>(prows, n, out.device_data<float>());
  QAT_CUDA_CHECK_LAUNCH(mean_in_order_kernel);
  return record(out, "cross_entropy", {&logits},
                [sl = Saved(logp), st = Saved(tc), on, off](const Tensor& g, const NeedGrad&) {
                  const float* gv = scalar_gradient(g, "cross_entropy backward");
                  const Tensor& lp = sl.get("cross_entropy");
                  const Tensor& t = st.get("cross_entropy");
                  const int64_t n = lp.size(0), c = lp.size(1);
                  Tensor dx = Tensor::empty({n, c}, DType::f32, Device::cuda);
                  if (n > 0) {
                    cross_entropy_backward_kernel<<<cuda::blocks_for(n * c), cuda::kThreadsPerBlock>>>(
                        lp.device_data<float>(), t.device_data<int32_t>(), gv, dx.device_data<float>(), n, c, on,
                        off);
                    QAT_CUDA_CHECK_LAUNCH(cross_entropy_backward_kernel);
                  }
                  return TensorList{dx};
                });
}

}  // namespace qat::cuda_twin
