#include "core/ops/linear.h"

#include "core/blas.h"
#include "core/ops/common.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

using detail::check_f32_any_device;

Tensor matmul(const Tensor& a, const Tensor& b) {
  QAT_PROFILE("matmul.forward");
  check_f32_any_device(a, "matmul", "a");
  check_f32_any_device(b, "matmul", "b");
  detail::check_same_device("matmul", {{"a", &a}, {"b", &b}});
  QAT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "matmul: expected (M,K) x (K,N), got ",
            a.sizes(), " x ", b.sizes());
#if QAT_WITH_CUDA
  if (a.device() == Device::cuda) return cuda_twin::matmul(a, b);  // core/ops/linear.cu
#endif
  Tensor ac = a.contiguous(), bc = b.contiguous();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor out = Tensor::empty({m, n});
  sgemm(false, false, m, n, k, 1.f, ac.data<float>(), k, bc.data<float>(), n, 0.f, out.data<float>(), n);
  return record(out, "matmul", {&a, &b}, [sa = Saved(ac), sb = Saved(bc)](const Tensor& g, const NeedGrad& need) {
    QAT_PROFILE("matmul.backward");
    const Tensor& av = sa.get("matmul");
    const Tensor& bv = sb.get("matmul");
    Tensor gc = g.contiguous();
    const int64_t m = av.size(0), k = av.size(1), n = bv.size(1);
    TensorList r(2);
    if (need[0]) {
      r[0] = Tensor::empty({m, k});
      sgemm(false, true, m, k, n, 1.f, gc.data<float>(), n, bv.data<float>(), n, 0.f, r[0].data<float>(), k);
    }
    if (need[1]) {
      r[1] = Tensor::empty({k, n});
      sgemm(true, false, k, n, m, 1.f, av.data<float>(), k, gc.data<float>(), n, 0.f, r[1].data<float>(), n);
    }
    return r;
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  QAT_PROFILE("linear.forward");
  check_f32_any_device(x, "linear", "input");
  check_f32_any_device(weight, "linear", "weight");
  QAT_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "linear: expected input (N,",
            weight.dim() == 2 ? weight.size(1) : -1, ") for weight ", weight.sizes(), ", got input ", x.sizes());
  const int64_t n = x.size(0), in = x.size(1), out_f = weight.size(0);
  if (bias.defined()) {
    check_f32_any_device(bias, "linear", "bias");
    QAT_CHECK(bias.dim() == 1 && bias.size(0) == out_f, "linear: expected bias (", out_f, "), got ", bias.sizes());
  }
  detail::check_same_device("linear", {{"input", &x}, {"weight", &weight}, {"bias", &bias}});
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::linear(x, weight, bias);  // core/ops/linear.cu
#endif
  Tensor xc = x.contiguous(), wc = weight.contiguous();
  Tensor out = Tensor::empty({n, out_f});
  float* po = out.data<float>();
  if (bias.defined()) {
    Tensor bc = bias.contiguous();
    const float* pb = bc.data<float>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out_f; ++j) po[i * out_f + j] = pb[j];
  }
  sgemm(false, true, n, out_f, in, 1.f, xc.data<float>(), in, wc.data<float>(), in, bias.defined() ? 1.f : 0.f, po,
        out_f);
  const bool need_x = any_requires_grad({&x}), need_w = any_requires_grad({&weight});
  return record(out, "linear", {&x, &weight, &bias},
                [sx = Saved(need_w ? xc : Tensor()), sw = Saved(need_x ? wc : Tensor())](const Tensor& g,
                                                                                      const NeedGrad& need) {
                  return linear_backward(g, need[1] ? sx.get("linear") : Tensor(),
                                         need[0] ? sw.get("linear") : Tensor(), need);
                });
}

TensorList linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const NeedGrad& need) {
  QAT_PROFILE("linear.backward");
#if QAT_WITH_CUDA
  if (g.device() == Device::cuda) return cuda_twin::linear_backward(g, x, weight, need);  // core/ops/linear.cu
#endif
  detail::check_same_device("linear backward", {{"gradient", &g}, {"input", &x}, {"weight", &weight}});
  Tensor gc = g.contiguous();
  const int64_t n = gc.size(0), out_f = gc.size(1);
  const float* pg = gc.data<float>();
  TensorList r(3);
  if (need[0]) {
    const Tensor wc = weight.contiguous();
    const int64_t in = wc.size(1);
    r[0] = Tensor::empty({n, in});
    sgemm(false, false, n, in, out_f, 1.f, pg, out_f, wc.data<float>(), in, 0.f, r[0].data<float>(), in);
  }
  if (need[1]) {
    const Tensor xv = x.contiguous();
    const int64_t in = xv.size(1);
    r[1] = Tensor::empty({out_f, in});
    sgemm(true, false, out_f, in, n, 1.f, pg, out_f, xv.data<float>(), in, 0.f, r[1].data<float>(), in);
  }
  if (need[2]) {
    r[2] = Tensor::zeros({out_f});
    float* pb = r[2].data<float>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out_f; ++j) pb[j] += pg[i * out_f + j];
  }
  return r;
}

}  // namespace qat
