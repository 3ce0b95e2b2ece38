// The CUDA twin of lsq_quantize / lsq_plus_quantize (quant/sim/lsq.cpp): the
// same checks and per-channel constants (lsq_plan.h), the per-element rules
// of quant/sim/math.h, so the forward and dv equal the CPU op's bit for bit
// (LSQ+'s `q * s + beta` may be fused into one FMA on either side: there,
// to rounding). The step and offset sums run as the slots split
// (channel_geometry.h, math::lsq_slot_backward) in double, in another order
// than the CPU's: they agree to rounding.
#include <vector>

#include "core/autograd.h"
#include "core/cuda_check.h"
#include "core/cuda_libraries.h"
#include "core/cuda_runtime.h"
#include "core/cuda_launch.h"
#include "core/ops/common.h"
#include "quant/observe/channel_layout.h"
#include "quant/sim/cuda_twins.h"
#include "quant/sim/lsq_plan.h"
#include "quant/sim/math.h"

namespace qat::quant::cuda_twin {

namespace {

// params: s[C], 1/s[C], beta[C].
template <bool kPlus>
__global__ void lsq_forward_kernel(const float* __restrict__ v, float* __restrict__ out, ChannelGeometry geo,
                                   const float* __restrict__ params, float lo, float hi) {
  const int64_t C = geo.channels;
  QAT_GRID_STRIDE_LOOP(i, geo.outer * C * geo.inner) {
    const int64_t c = geo.channel_of(i);
    out[i] = math::lsq_value<kPlus>(v[i], params[c], params[C + c], params[2 * C + c], lo, hi);
  }
}

// Index j = c * slots + s. partial: ds[C * slots], then db[C * slots].
template <bool kPlus, bool kPaperClip>
__global__ void lsq_slot_kernel(const float* __restrict__ v, const float* __restrict__ g, float* __restrict__ dv,
                                ChannelGeometry geo, const float* __restrict__ inv_beta, int64_t slots, float lo,
                                float hi, double* __restrict__ partial) {
  const int64_t n = geo.channels * slots;
  QAT_GRID_STRIDE_LOOP(j, n) {
    math::lsq_slot_backward<kPlus, kPaperClip>(v, g, dv, geo, inv_beta, j / slots, j % slots, slots, lo, hi,
                                               partial[j], partial[n + j]);
  }
}

// sums[2C]: channel c's step sum, then its offset sum.
__global__ void lsq_fold_kernel(const double* __restrict__ partial, int64_t channels, int64_t slots,
                                double* __restrict__ sums) {
  QAT_GRID_STRIDE_LOOP(k, 2 * channels) sums[k] = math::channel_sum(partial, k, slots);
}

ChannelGeometry geometry_of(const Tensor& v, const QuantSpec& spec) {
  const ChannelLayout l = ChannelLayout::of(v, spec.per_channel, spec.axis);
  return {l.outer, l.channels, l.inner};
}

template <bool kPlus>
void launch_slots(bool paper, const float* v, const float* g, float* dv, const ChannelGeometry& geo,
                  const float* inv_beta, int64_t slots, float lo, float hi, double* partial) {
  const unsigned blocks = cuda::blocks_for(geo.channels * slots);
  if (paper)
    lsq_slot_kernel<kPlus, true><<<blocks, cuda::kThreadsPerBlock>>>(v, g, dv, geo, inv_beta, slots, lo, hi, partial);
  else
    lsq_slot_kernel<kPlus, false><<<blocks, cuda::kThreadsPerBlock>>>(v, g, dv, geo, inv_beta, slots, lo, hi, partial);
  QAT_CUDA_CHECK_LAUNCH(lsq_slot_kernel);
}

// dv (when need_dv) and the per-channel [step sums, offset sums] on the host.
std::vector<double> backward_sums(const Tensor& v, const Tensor& g, Tensor* dv, const ChannelGeometry& geo,
                                  const LsqChannels& k, bool plus, LsqClip clip, float lo, float hi) {
  const int64_t C = geo.channels, slots = slots_for(geo);
  const Tensor inv_beta = qat::detail::device_constants({&k.inv, &k.beta});
  // Scratch in doubles (Tensor has no float64), from the caching allocator.
  const cuda::DeviceBuffer partial(static_cast<size_t>(2 * C * slots) * sizeof(double)),
      sums(static_cast<size_t>(2 * C) * sizeof(double));
  double* p = static_cast<double*>(partial.get());
  double* s = static_cast<double*>(sums.get());
  float* pdv = dv ? dv->device_data<float>() : nullptr;
  const bool paper = clip == LsqClip::paper;
  if (plus)
    launch_slots<true>(paper, v.device_data<float>(), g.device_data<float>(), pdv, geo,
                       inv_beta.device_data<float>(), slots, lo, hi, p);
  else
    launch_slots<false>(paper, v.device_data<float>(), g.device_data<float>(), pdv, geo,
                        inv_beta.device_data<float>(), slots, lo, hi, p);
  lsq_fold_kernel<<<cuda::blocks_for(2 * C), cuda::kThreadsPerBlock>>>(p, C, slots, s);
  QAT_CUDA_CHECK_LAUNCH(lsq_fold_kernel);
  std::vector<double> host(2 * C);
  cuda::copy(host.data(), Device::cpu, s, Device::cuda, host.size() * sizeof(double));
  return host;
}

}  // namespace

Tensor lsq_quantize(const char* op, const Tensor& v, const Tensor& step, const Tensor* offset, const QuantSpec& spec,
                    float grad_scale, LsqClip clip) {
  const bool plus = offset != nullptr;
  const float floor = lsq_min_step(spec);
  const float lo = static_cast<float>(spec.qmin()), hi = static_cast<float>(spec.qmax());
  const ChannelGeometry geo = geometry_of(v, spec);
  const LsqChannels k = lsq_channel_constants(step, plus ? *offset : Tensor(), floor);
  const Tensor vc = v.contiguous();
  Tensor out = Tensor::empty(v.sizes(), DType::f32, Device::cuda);
  const int64_t n = out.numel();
  if (n > 0) {
    const Tensor params = qat::detail::device_constants({&k.s, &k.inv, &k.beta});
    const unsigned blocks = cuda::blocks_for(n);
    if (plus)
      lsq_forward_kernel<true><<<blocks, cuda::kThreadsPerBlock>>>(vc.device_data<float>(), out.device_data<float>(),
                                                                   geo, params.device_data<float>(), lo, hi);
    else
      lsq_forward_kernel<false><<<blocks, cuda::kThreadsPerBlock>>>(vc.device_data<float>(), out.device_data<float>(),
                                                                    geo, params.device_data<float>(), lo, hi);
    QAT_CUDA_CHECK_LAUNCH(lsq_forward_kernel);
  }
  auto backward = [sv = Saved(vc), sp = Saved(step), so = Saved(plus ? *offset : Tensor()), spec, grad_scale, clip,
                   floor, lo, hi, plus, op](const Tensor& grad, const NeedGrad& need) {
    const Tensor& v = sv.get(op);
    const Tensor& p = sp.get(op);
    const Tensor off = plus ? so.get(op) : Tensor();
    qat::detail::check_same_device(op, {{"input", &v}, {"gradient", &grad}});
    const ChannelGeometry geo = geometry_of(v, spec);
    const LsqChannels k = lsq_channel_constants(p, off, floor);
    const Tensor gc = grad.contiguous();
    Tensor dv;
    if (need[0]) dv = Tensor::empty(v.sizes(), DType::f32, Device::cuda);
    const std::vector<double> sums =
        v.numel() == 0 ? std::vector<double>(2 * geo.channels, 0.0)
                       : backward_sums(v, gc, need[0] ? &dv : nullptr, geo, k, plus, clip, lo, hi);
    const int64_t C = geo.channels;
    TensorList grads{dv, Tensor()};
    if (need[1]) {  // dL/dp = sign(p) dL/ds: Note [LSQ step positivity]
      std::vector<float> ds(C);
      for (int64_t j = 0; j < C; ++j) ds[j] = static_cast<float>(sums[j] * grad_scale) * k.sign[j];
      grads[1] = Tensor::from_vector(ds, p.sizes()).to(Device::cuda);
    }
    if (plus) {
      Tensor db;
      if (need[2]) {
        std::vector<float> h(C);
        for (int64_t j = 0; j < C; ++j) h[j] = static_cast<float>(sums[C + j] * grad_scale);
        db = Tensor::from_vector(h, off.sizes()).to(Device::cuda);
      }
      grads.push_back(db);
    }
    return grads;
  };
  if (plus) return record(out, op, {&v, &step, offset}, std::move(backward));
  return record(out, op, {&v, &step}, std::move(backward));
}

}  // namespace qat::quant::cuda_twin
