#include "core/ops/conv2d.h"

#include "core/ops/common.h"
#include "core/ops/conv_onednn.h"
#include "core/ops/depthwise_conv.h"
#include "core/profiler.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

using conv_detail::Geometry;
using detail::check_f32_any_device;

namespace {

Geometry check_and_measure(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  check_f32_any_device(x, "conv2d", "input");
  check_f32_any_device(w, "conv2d", "weight");
  QAT_CHECK(x.dim() == 4, "conv2d: expected input (N,C,H,W), got ", x.sizes());
  QAT_CHECK(w.dim() == 4, "conv2d: expected weight (O,C/groups,KH,KW), got ", w.sizes());
  QAT_CHECK(p.groups >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.dil_h >= 1 && p.dil_w >= 1 && p.pad_h >= 0 &&
                p.pad_w >= 0,
            "conv2d: invalid params stride (", p.stride_h, ",", p.stride_w, ") padding (", p.pad_h, ",", p.pad_w,
            ") dilation (", p.dil_h, ",", p.dil_w, ") groups ", p.groups);
  Geometry g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), 0, 0, p.groups};
  QAT_CHECK(g.c % g.groups == 0 && g.o % g.groups == 0, "conv2d: channels in ", g.c, " and out ", g.o,
            " must be divisible by groups ", g.groups);
  QAT_CHECK(w.size(1) == g.cg(), "conv2d: expected input with ", w.size(1) * g.groups, " channels for weight ",
            w.sizes(), " and groups ", g.groups, ", got input ", x.sizes());
  if (b.defined()) {
    check_f32_any_device(b, "conv2d", "bias");
    QAT_CHECK(b.dim() == 1 && b.size(0) == g.o, "conv2d: expected bias (", g.o, "), got ", b.sizes());
  }
  detail::check_same_device("conv2d", {{"input", &x}, {"weight", &w}, {"bias", &b}});
  g.oh = conv_out_size(g.h, g.kh, p.stride_h, p.pad_h, p.dil_h, "conv2d");
  g.ow = conv_out_size(g.w, g.kw, p.stride_w, p.pad_w, p.dil_w, "conv2d");
  return g;
}

// The profiler's row for the kinds of convolution whose share of a step is
// asked about (MobileNetV2's depthwise and 1x1 layers), or none.
const char* kind_row(const Geometry& g, bool backward) {
  if (conv_detail::is_depthwise(g))
    return backward ? "depthwise (in conv2d.backward)" : "depthwise (in conv2d.forward)";
  if (g.kh == 1 && g.kw == 1 && g.groups == 1) return backward ? "1x1 (in conv2d.backward)" : "1x1 (in conv2d.forward)";
  return nullptr;
}

Tensor forward_impl(const Tensor& xc, const Tensor& wc, const Tensor& bias, const Geometry& g, const Conv2dParams& p) {
  Tensor out = Tensor::empty({g.n, g.o, g.oh, g.ow});
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  const float* pb = bc.defined() ? bc.data<float>() : nullptr;
  ProfileScope row(kind_row(g, false));
  if (conv_detail::is_depthwise(g)) {
    // Its own kernel: oneDNN's, with the reorders it needs, was slower here
    // (MobileNetV2's depthwise forwards, Note [oneDNN convolutions]).
    conv_detail::depthwise_forward(xc.data<float>(), wc.data<float>(), pb, g, p, out.data<float>());
    return out;
  }
  conv_detail::onednn_forward(xc.data<float>(), wc.data<float>(), pb, g, p, out.data<float>());
  return out;
}

TensorList backward_impl(const Tensor& gy, const Tensor& xc, const Tensor& wc, const Geometry& g, const Conv2dParams& p,
                         const NeedGrad& need) {
  const int64_t P = g.p();
  Tensor gyc = gy.contiguous();
  const float* pgy = gyc.data<float>();
  TensorList r(3);
  if (need[2]) {
    r[2] = Tensor::zeros({g.o});
    float* db = r[2].data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < g.o; ++o) {
      double acc = 0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t i = 0; i < P; ++i) acc += pgy[(n * g.o + o) * P + i];
      db[o] = static_cast<float>(acc);
    }
  }
  if (!need[0] && !need[1]) return r;
  float* pdx = nullptr;
  if (need[0]) {
    r[0] = Tensor::empty(xc.sizes());  // (oneDNN writes every element)
    pdx = r[0].data<float>();
  }
  float* pdw = nullptr;
  if (need[1]) {
    r[1] = Tensor::empty(wc.sizes());
    pdw = r[1].data<float>();
  }
  ProfileScope row(kind_row(g, true));
  conv_detail::onednn_backward(pgy, xc.data<float>(), wc.data<float>(), g, p, pdx, pdw);
  return r;
}

}  // namespace

std::string conv_kernels_name() { return conv_detail::onednn_name(); }

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  QAT_PROFILE("conv2d.forward");
  const Geometry g = check_and_measure(x, weight, bias, p);
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::conv2d(x, weight, bias, p);  // core/ops/conv2d.cu
#endif
  Tensor xc = x.contiguous(), wc = weight.contiguous();
  Tensor out = forward_impl(xc, wc, bias, g, p);
  return record(out, "conv2d", {&x, &weight, &bias},
                [sx = Saved(xc), sw = Saved(wc), g, p](const Tensor& gy, const NeedGrad& need) {
                  QAT_PROFILE("conv2d.backward");
                  return backward_impl(gy, sx.get("conv2d"), sw.get("conv2d"), g, p, need);
                });
}

TensorList conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                           const NeedGrad& need) {
  QAT_PROFILE("conv2d.backward");
  const Geometry g = check_and_measure(x, weight, Tensor(), p);
  detail::check_gradient_device(gy, x.device(), "conv2d backward");
  QAT_CHECK(gy.sizes() == Shape({g.n, g.o, g.oh, g.ow}), "conv2d backward: expected a gradient ",
            Shape({g.n, g.o, g.oh, g.ow}), ", got ", gy.sizes());
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::conv2d_backward(gy, x, weight, p, need);  // core/ops/conv2d.cu
#endif
  return backward_impl(gy, x.contiguous(), weight.contiguous(), g, p, need);
}

}  // namespace qat
