// The CUDA twin of fake_quantize (quant/sim/fake_quant.cpp): the same checks
// (plan_fake_quantize), the same per-channel constants computed on the host,
// and the per-element rules of quant/sim/math.h (Note [fake-quant
// arithmetic]), so its outputs and masks equal the CPU op's bit for bit.
#include <cstdint>

#include "core/autograd.h"
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "quant/sim/cuda_twins.h"
#include "quant/sim/fake_quant_plan.h"
#include "quant/sim/math.h"

namespace qat::quant::cuda_twin {

namespace {

// params: scale[C], then 1/scale[C], then zero point[C]. Element i of the
// (outer, C, inner) layout is in channel (i / inner) % C (Note [channel layout]).
template <bool kMask>
__global__ void fake_quant_kernel(const float* __restrict__ x, float* __restrict__ y, uint8_t* __restrict__ mask,
                                  int64_t n, int64_t channels, int64_t inner, const float* __restrict__ params,
                                  float qmin, float qmax) {
  QAT_GRID_STRIDE_LOOP(i, n) {
    const int64_t c = channels == 1 ? 0 : (i / inner) % channels;
    const float s = params[c], inv = params[channels + c], z = params[2 * channels + c];
    const float q = math::fake_quant_grid(x[i], inv, z);
    y[i] = math::fake_quant_dequant(q, s, z, qmin, qmax);
    if constexpr (kMask) mask[i] = static_cast<uint8_t>(math::ste_passes(q, qmin, qmax));
  }
}

__global__ void ste_backward_kernel(const float* __restrict__ dy, const uint8_t* __restrict__ mask,
                                    float* __restrict__ dx, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) dx[i] = math::ste_grad(dy[i], mask[i]);
}

}  // namespace

Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, const QuantSpec& spec,
                     SteKind ste) {
  const FakeQuantPlan p = plan_fake_quantize(x, scale, zero_point, spec);
  const Tensor params = qat::detail::device_constants({&p.s, &p.inv, &p.z});
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes(), DType::f32, Device::cuda);
  const bool need_mask = ste == SteKind::clipped && any_requires_grad({&x});
  Tensor mask = need_mask ? Tensor::empty(x.sizes(), DType::u8, Device::cuda) : Tensor();
  const int64_t n = out.numel();
  if (n > 0) {
    const unsigned blocks = cuda::blocks_for(n);
    if (need_mask) {
      fake_quant_kernel<true><<<blocks, cuda::kThreadsPerBlock>>>(
          xc.device_data<float>(), out.device_data<float>(), mask.device_data<uint8_t>(), n, p.layout.channels,
          p.layout.inner, params.device_data<float>(), p.qmin, p.qmax);
    } else {
      fake_quant_kernel<false><<<blocks, cuda::kThreadsPerBlock>>>(xc.device_data<float>(), out.device_data<float>(),
                                                                   nullptr, n, p.layout.channels, p.layout.inner,
                                                                   params.device_data<float>(), p.qmin, p.qmax);
    }
    QAT_CUDA_CHECK_LAUNCH(fake_quant_kernel);
  }
  if (ste == SteKind::plain)
    return record(out, "fake_quantize", {&x}, [](const Tensor& g, const NeedGrad&) { return TensorList{g}; });
  // dx = dy * mask (math::ste_grad), a fresh tensor on the device.
  return record(out, "fake_quantize", {&x}, [mask](const Tensor& g, const NeedGrad&) {
    qat::detail::check_same_device("fake_quantize backward", {{"mask", &mask}, {"gradient", &g}});
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(mask.sizes(), DType::f32, Device::cuda);
    const int64_t m = dx.numel();
    if (m > 0) {
      ste_backward_kernel<<<cuda::blocks_for(m), cuda::kThreadsPerBlock>>>(
          gc.device_data<float>(), mask.device_data<uint8_t>(), dx.device_data<float>(), m);
      QAT_CUDA_CHECK_LAUNCH(ste_backward_kernel);
    }
    return TensorList{dx};
  });
}

}  // namespace qat::quant::cuda_twin
