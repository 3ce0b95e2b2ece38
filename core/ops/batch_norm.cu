// The CUDA twin of batch_norm (core/ops/batch_norm.cpp) on cuDNN's spatial
// batch norm ((N,C) as (N,C,1,1)), with the CPU op's semantics throughout:
//
// - Batch statistics (training, or eval without running stats):
//   cudnnBatchNormalizationForwardTraining normalises with the batch mean and
//   biased variance and saves the mean and 1/sqrt(var + eps) for
//   cudnnBatchNormalizationBackward, whose dx, dgamma and dbeta are the
//   header's training formulas.
// - Running stats (training with them defined): cuDNN updates them in place,
//   r = r (1 - factor) + stat factor (cuDNN's documented moving average),
//   so factor = momentum as the header's r = (1-m) r + m stat. Its running
//   variance takes the unbiased batch variance, as the header asks: cuDNN's
//   header only says "moving average of variance[x]"; the unbiased estimate
//   is what frameworks built on cuDNN's batch norm (PyTorch, MXNet) document
//   and measure for it. The [cuda] parity test compares the updated running
//   variance with the CPU op's on batches where biased and unbiased differ by
//   a third, so a difference cannot pass unseen.
// - Eval with running stats: cudnnBatchNormalizationForwardInference; its
//   backward (cuDNN has none with fixed statistics) is the header's eval
//   formulas on qat's kernels: dx = gamma*istd*g (op_math::bn_eval_grad),
//   dgamma = istd * sum g (x - mean), dbeta = sum g (cuda::channel_sums).
// - No affine: scale 1 and shift 0 given to cuDNN, no gradient returned.
// Refused on cuda (clear errors, never a silent difference): eps below
// CUDNN_BN_MIN_EPSILON (cuda_plan::plan_batch_norm) and synchronised batch
// norm over processes (core/ops/batch_norm.cpp).
#include "core/autograd.h"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/cuda_libraries.h"
#include "core/cuda_runtime.h"
#include "core/ops/channel_sums.cuh"
#include "core/ops/common.h"
#include "core/ops/cuda_plans.h"
#include "core/ops/cuda_twins.h"
#include "core/ops/math.h"

namespace qat::cuda_twin {

namespace {

using cuda_plan::BatchNormPlan;

const float kOne = 1.f, kZero = 0.f;
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

// What backward needs, fixed when the forward runs.
struct BatchNormSaved {
  BatchNormPlan plan;
  int64_t channels = 0, inner = 0;  // (outer, channels, inner) of x
  bool batch_stats = false;
  float eps = 0.f;
  Tensor mean, inv_std;  // (C) on cuda: the statistics x was normalised with
  Tensor scale;          // (C) on cuda: the weight, or ones without affine
};

Tensor per_channel_constant(int64_t c, float v) { return Tensor::full({c}, v).to(Device::cuda); }

__global__ void inv_std_kernel(const float* __restrict__ var, float* __restrict__ inv_std, float eps, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) inv_std[i] = op_math::bn_inv_std(var[i], eps);
}

// The eval backward's per-channel sums: g, and g (x - mean) with the product
// in float (as the CPU loop).
struct EvalGradTerms {
  const float* g;
  const float* x;
  const float* mean;
  __device__ void operator()(int64_t i, int64_t c, double (&acc)[2]) const {
    acc[0] += static_cast<double>(g[i]);
    acc[1] += static_cast<double>(g[i] * (x[i] - mean[c]));
  }
};

// sums: (2, C) from EvalGradTerms. dgamma = float(sum g (x - mean)) * istd,
// dbeta = float(sum g), as the CPU op rounds them.
__global__ void eval_param_grads_kernel(const float* __restrict__ sums, const float* __restrict__ inv_std,
                                        float* __restrict__ dgamma, float* __restrict__ dbeta, int64_t channels) {
  QAT_GRID_STRIDE_LOOP(c, channels) {
    if (dgamma) dgamma[c] = sums[channels + c] * inv_std[c];
    if (dbeta) dbeta[c] = sums[c];
  }
}

__global__ void eval_input_grad_kernel(const float* __restrict__ g, const float* __restrict__ gamma,
                                       const float* __restrict__ inv_std, float* __restrict__ dx, int64_t channels,
                                       int64_t inner, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) {
    const int64_t c = op_math::channel_of(i, channels, inner);
    dx[i] = op_math::bn_eval_grad(g[i], gamma[c], inv_std[c]);
  }
}

TensorList backward_batch_stats(const Tensor& g, const Tensor& x, const BatchNormSaved& s, const NeedGrad& need) {
  Tensor dx = Tensor::empty(x.sizes(), DType::f32, Device::cuda);
  Tensor dgamma = Tensor::empty({s.channels}, DType::f32, Device::cuda);
  Tensor dbeta = Tensor::empty({s.channels}, DType::f32, Device::cuda);
  const cuda::TensorDescriptor xd(s.plan.x), cd(s.plan.channel);
  QAT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cuda::cudnn_handle(), kMode, &kOne, &kZero, &kOne, &kZero, xd.get(), x.device_data<float>(), xd.get(),
      g.device_data<float>(), xd.get(), dx.device_data<float>(), cd.get(), s.scale.device_data<float>(),
      dgamma.device_data<float>(), dbeta.device_data<float>(), static_cast<double>(s.eps),
      s.mean.device_data<float>(), s.inv_std.device_data<float>()));
  return {need[0] ? dx : Tensor(), need[1] ? dgamma : Tensor(), need[2] ? dbeta : Tensor()};
}

TensorList backward_running_stats(const Tensor& g, const Tensor& x, const BatchNormSaved& s, const NeedGrad& need) {
  const int64_t C = s.channels, n = x.numel();
  TensorList r(3);
  if (need[1] || need[2]) {
    const Tensor sums = Tensor::empty({2, C}, DType::f32, Device::cuda);
    cuda::channel_sums<2>(EvalGradTerms{g.device_data<float>(), x.device_data<float>(), s.mean.device_data<float>()},
                          n / (C * s.inner), C, s.inner, sums.device_data<float>());
    if (need[1]) r[1] = Tensor::empty({C}, DType::f32, Device::cuda);
    if (need[2]) r[2] = Tensor::empty({C}, DType::f32, Device::cuda);
    eval_param_grads_kernel<<<cuda::blocks_for(C), cuda::kThreadsPerBlock>>>(
        sums.device_data<float>(), s.inv_std.device_data<float>(), need[1] ? r[1].device_data<float>() : nullptr,
        need[2] ? r[2].device_data<float>() : nullptr, C);
    QAT_CUDA_CHECK_LAUNCH(eval_param_grads_kernel);
  }
  if (need[0]) {
    r[0] = Tensor::empty(x.sizes(), DType::f32, Device::cuda);
    eval_input_grad_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        g.device_data<float>(), s.scale.device_data<float>(), s.inv_std.device_data<float>(),
        r[0].device_data<float>(), C, s.inner, n);
    QAT_CUDA_CHECK_LAUNCH(eval_input_grad_kernel);
  }
  return r;
}

// With no elements there is nothing to normalise (eval only: training needs
// more than one value per channel): an empty dx, and zero sums.
TensorList backward_empty(const Tensor& x, const BatchNormSaved& s, const NeedGrad& need) {
  TensorList r(3);
  if (need[0]) r[0] = Tensor::empty(x.sizes(), DType::f32, Device::cuda);
  if (need[1]) r[1] = Tensor::zeros({s.channels}, DType::f32, Device::cuda);
  if (need[2]) r[2] = Tensor::zeros({s.channels}, DType::f32, Device::cuda);
  return r;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, float momentum, float eps) {
  BatchNormSaved s;
  s.batch_stats = training || !running_mean.defined();
  s.plan = cuda_plan::plan_batch_norm(x.sizes(), static_cast<double>(eps), CUDNN_BN_MIN_EPSILON, s.batch_stats);
  s.channels = x.size(1);
  s.inner = x.dim() == 4 ? x.size(2) * x.size(3) : 1;
  s.eps = eps;
  s.scale = weight.defined() ? weight : per_channel_constant(s.channels, 1.f);
  const Tensor shift = bias.defined() ? bias : per_channel_constant(s.channels, 0.f);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes(), DType::f32, Device::cuda);
  s.mean = Tensor::empty({s.channels}, DType::f32, Device::cuda);
  s.inv_std = Tensor::empty({s.channels}, DType::f32, Device::cuda);
  const bool update_running = training && running_mean.defined();
  if (x.numel() > 0) {
    const cuda::TensorDescriptor xd(s.plan.x), cd(s.plan.channel);
    const cudnnHandle_t h = cuda::cudnn_handle();
    if (s.batch_stats) {
      QAT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          h, kMode, &kOne, &kZero, xd.get(), xc.device_data<float>(), xd.get(), out.device_data<float>(), cd.get(),
          s.scale.device_data<float>(), shift.device_data<float>(), static_cast<double>(momentum),
          update_running ? running_mean.device_data<float>() : nullptr,
          update_running ? running_var.device_data<float>() : nullptr, static_cast<double>(eps),
          s.mean.device_data<float>(), s.inv_std.device_data<float>()));
    } else {
      QAT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          h, kMode, &kOne, &kZero, xd.get(), xc.device_data<float>(), xd.get(), out.device_data<float>(), cd.get(),
          s.scale.device_data<float>(), shift.device_data<float>(), running_mean.device_data<float>(),
          running_var.device_data<float>(), static_cast<double>(eps)));
    }
  }
  if (!s.batch_stats) {
    // The running stats as they are now (a later training step updates them in place).
    s.mean.copy_(running_mean);
    if (s.channels > 0) {
      inv_std_kernel<<<cuda::blocks_for(s.channels), cuda::kThreadsPerBlock>>>(
          running_var.device_data<float>(), s.inv_std.device_data<float>(), eps, s.channels);
      QAT_CUDA_CHECK_LAUNCH(inv_std_kernel);
    }
  }
  if (update_running) {
    running_mean.impl_ptr()->storage->version++;
    running_var.impl_ptr()->storage->version++;
  }
  return record(out, "batch_norm", {&x, &weight, &bias},
                [sx = Saved(xc), sw = Saved(weight), s](const Tensor& g, const NeedGrad& need) {
                  const Tensor& xv = sx.get("batch_norm");
                  sw.get("batch_norm");  // refuses a weight changed in place since the forward
                  detail::check_same_device("batch_norm backward", {{"input", &xv}, {"gradient", &g}});
                  QAT_CHECK(g.sizes() == xv.sizes(), "batch_norm backward: expected a gradient ", xv.sizes(),
                            ", got ", g.sizes());
                  if (xv.numel() == 0) return backward_empty(xv, s, need);
                  const Tensor gc = g.contiguous();
                  return s.batch_stats ? backward_batch_stats(gc, xv, s, need)
                                       : backward_running_stats(gc, xv, s, need);
                });
}

}  // namespace qat::cuda_twin
