// The CUDA twins of matmul and linear (core/ops/linear.cpp) on cuBLAS sgemm.
// Every product is a cuda_plan::GemmPlan (core/ops/cuda_plans.h), which the
// CPU tests execute with OpenBLAS and compare with the CPU ops; the bias is
// broadcast and its gradient summed with op_math's channel rules.
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

using cuda_plan::GemmOperands;
using cuda_plan::GemmPlan;
using cuda_plan::GemmWork;

cublasOperation_t op_of(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// c (c_numel floats, the row-major result) = the plan's product.
void run_gemm(const GemmPlan& p, const GemmOperands& operands, float* c, int64_t c_numel) {
  switch (p.work) {
    case GemmWork::nothing:
    case GemmWork::keep_c:
      return;
    case GemmWork::zero_c:
      cuda::memset_zero(c, static_cast<size_t>(c_numel) * sizeof(float));
      return;
    case GemmWork::gemm:
      break;
  }
  const float alpha = 1.f;
  QAT_CUBLAS_CHECK(cublasSgemm(cuda::cublas_handle(), op_of(p.trans_first), op_of(p.trans_second), p.m, p.n, p.k,
                               &alpha, operands.of(p.first), p.ld_first, operands.of(p.second), p.ld_second, &p.beta,
                               c, p.ldc));
}

// out (rows, features) = bias broadcast over the rows.
__global__ void broadcast_rows_kernel(const float* __restrict__ bias, float* __restrict__ out, int64_t features,
                                      int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) out[i] = bias[op_math::channel_of(i, features, 1)];
}

// The bias gradient's term: the output gradient itself.
struct GradientTerm {
  const float* g;
  __device__ void operator()(int64_t i, int64_t, double (&acc)[1]) const { acc[0] += static_cast<double>(g[i]); }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor out = Tensor::empty({m, n}, DType::f32, Device::cuda);
  run_gemm(cuda_plan::matmul_forward_plan(m, k, n), {ac.device_data<float>(), bc.device_data<float>(), nullptr},
           out.device_data<float>(), m * n);
  return record(out, "matmul", {&a, &b}, [sa = Saved(ac), sb = Saved(bc)](const Tensor& g, const NeedGrad& need) {
    const Tensor& av = sa.get("matmul");
    const Tensor& bv = sb.get("matmul");
    detail::check_same_device("matmul backward", {{"a", &av}, {"gradient", &g}});
    const int64_t m = av.size(0), k = av.size(1), n = bv.size(1);
    QAT_CHECK(g.sizes() == Shape({m, n}), "matmul backward: expected a gradient (", m, ",", n, "), got ", g.sizes());
    const Tensor gc = g.contiguous();
    const GemmOperands operands{av.device_data<float>(), bv.device_data<float>(), gc.device_data<float>()};
    TensorList r(2);
    if (need[0]) {
      r[0] = Tensor::empty({m, k}, DType::f32, Device::cuda);
      run_gemm(cuda_plan::matmul_grad_a_plan(m, k, n), operands, r[0].device_data<float>(), m * k);
    }
    if (need[1]) {
      r[1] = Tensor::empty({k, n}, DType::f32, Device::cuda);
      run_gemm(cuda_plan::matmul_grad_b_plan(m, k, n), operands, r[1].device_data<float>(), k * n);
    }
    return r;
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Tensor xc = x.contiguous(), wc = weight.contiguous();
  const int64_t rows = x.size(0), in = x.size(1), out_f = weight.size(0);
  Tensor out = Tensor::empty({rows, out_f}, DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (bias.defined() && n > 0) {
    const Tensor bc = bias.contiguous();
    broadcast_rows_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(bc.device_data<float>(),
                                                                            out.device_data<float>(), out_f, n);
    QAT_CUDA_CHECK_LAUNCH(broadcast_rows_kernel);
  }
  run_gemm(cuda_plan::linear_forward_plan(rows, in, out_f, bias.defined()),
           {xc.device_data<float>(), wc.device_data<float>(), nullptr}, out.device_data<float>(), n);
  const bool need_x = any_requires_grad({&x}), need_w = any_requires_grad({&weight});
  return record(out, "linear", {&x, &weight, &bias},
                [sx = Saved(need_w ? xc : Tensor()), sw = Saved(need_x ? wc : Tensor()), rows, out_f](
                    const Tensor& g, const NeedGrad& need) {
                  QAT_CHECK(g.sizes() == Shape({rows, out_f}), "linear backward: expected a gradient (", rows, ",",
                            out_f, "), got ", g.sizes());
                  QAT_CHECK(g.device() == Device::cuda, "linear backward: expected all tensors on one device, but "
                            "output is on cuda and gradient is on ", device_name(g.device()));
                  return linear_backward(g, need[1] ? sx.get("linear") : Tensor(),
                                         need[0] ? sw.get("linear") : Tensor(), need);
                });
}

TensorList linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const NeedGrad& need) {
  detail::check_same_device("linear backward", {{"gradient", &g}, {"input", &x}, {"weight", &weight}});
  const Tensor gc = g.contiguous();
  const int64_t rows = gc.size(0), out_f = gc.size(1);
  GemmOperands operands;
  operands.grad = gc.device_data<float>();
  TensorList r(3);
  if (need[0]) {
    const Tensor w = weight.contiguous();
    const int64_t in = w.size(1);
    operands.rhs = w.device_data<float>();
    r[0] = Tensor::empty({rows, in}, DType::f32, Device::cuda);
    run_gemm(cuda_plan::linear_grad_input_plan(rows, in, out_f), operands, r[0].device_data<float>(), rows * in);
  }
  if (need[1]) {
    const Tensor xv = x.contiguous();
    const int64_t in = xv.size(1);
    operands.lhs = xv.device_data<float>();
    r[1] = Tensor::empty({out_f, in}, DType::f32, Device::cuda);
    run_gemm(cuda_plan::linear_grad_weight_plan(rows, in, out_f), operands, r[1].device_data<float>(), out_f * in);
  }
  if (need[2]) {
    r[2] = Tensor::empty({out_f}, DType::f32, Device::cuda);
    cuda::channel_sums<1>(GradientTerm{operands.grad}, rows, out_f, 1, r[2].device_data<float>());
  }
  return r;
}

}  // namespace qat::cuda_twin
