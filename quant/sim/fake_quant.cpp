#include "quant/sim/fake_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <vector>

#include "core/ops/common.h"
#include "quant/observe/channel_layout.h"
#include "quant/sim/fake_quant_plan.h"
#include "quant/sim/fq_channel_rows.h"
#include "quant/sim/math.h"
#if QAT_WITH_CUDA
#include "quant/sim/cuda_twins.h"
#endif

namespace qat::quant {

namespace {

constexpr int64_t kBlock = int64_t{1} << 14;  // elements per parallel work item

// Channels innermost: element c uses (s[c], inv[c], z[c]).
template <bool kMask>
inline void fq_row(const float* __restrict x, float* __restrict y, uint8_t* __restrict m, int64_t C,
                   const float* __restrict s, const float* __restrict inv, const float* __restrict z, float qmin,
                   float qmax) {
  for (int64_t c = 0; c < C; ++c) {
    const float q = math::fake_quant_grid(x[c], inv[c], z[c]);
    y[c] = math::fake_quant_dequant(q, s[c], z[c], qmin, qmax);
    if constexpr (kMask) m[c] = static_cast<uint8_t>(math::ste_passes(q, qmin, qmax));
  }
}

// Note [channel layout] for the two work splits.
template <bool kMask>
void fq_forward(const float* px, float* py, uint8_t* pm, const ChannelLayout& l, const float* s, const float* inv,
                const float* z, float qmin, float qmax) {
  const int64_t n = l.numel();
  if (l.channels_innermost()) {
    const int64_t items = l.block_count(kBlock);
#pragma omp parallel for if (n > detail::kParallelGrain && items > 1) schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const auto [r0, r1] = l.block(it, kBlock);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = r * l.channels;
        fq_row<kMask>(px + o, py + o, kMask ? pm + o : nullptr, l.channels, s, inv, z, qmin, qmax);
      }
    }
    return;
  }
  const int64_t items = l.run_count(kBlock);
#pragma omp parallel for if (n > detail::kParallelGrain && items > 1) schedule(static)
  for (int64_t it = 0; it < items; ++it) {
    const ChannelLayout::Run r = l.run(it, kBlock);
    const int64_t c = r.channel;
    fq_span<kMask>(px + r.offset, py + r.offset, kMask ? pm + r.offset : nullptr, r.length, s[c], inv[c], z[c], qmin,
                   qmax);
  }
}

void check_qparams(const Tensor& x, const Tensor& scale, const Tensor& zero_point, const QuantSpec& spec,
                   int64_t C) {
  qat::detail::check_f32_any_device(x, "fake_quantize", "input");
  qat::detail::check_f32_any_device(scale, "fake_quantize", "scale");
  QAT_CHECK(zero_point.defined() && zero_point.dtype() == DType::i32, "fake_quantize: expected zero_point int32, got ",
            zero_point.defined() ? dtype_name(zero_point.dtype()) : "undefined");
  if (spec.per_channel) {
    QAT_CHECK(spec.axis < x.dim(), "fake_quantize: channel axis ", spec.axis, " out of range for input shape ",
              x.sizes());
    QAT_CHECK(scale.dim() == 1 && scale.size(0) == C && zero_point.sizes() == scale.sizes(),
              "fake_quantize: per-channel (axis ", spec.axis, ") input ", x.sizes(), " needs scale and zero_point (",
              C, "), got ", scale.sizes(), " and ", zero_point.sizes());
  } else {
    QAT_CHECK(scale.numel() == 1 && zero_point.numel() == 1 && scale.dim() <= 1 && zero_point.dim() <= 1,
              "fake_quantize: per-tensor needs scale and zero_point of shape (1), got ", scale.sizes(), " and ",
              zero_point.sizes());
  }
}

}  // namespace

// Whether 64 mask bytes are all 1 (every gradient passes).
static inline bool all_pass(const uint8_t* m) {
  uint64_t all = ~uint64_t{0};
  for (int w = 0; w < 8; ++w) {
    uint64_t v;
    std::memcpy(&v, m + 8 * w, sizeof v);
    all &= v;
  }
  return all == 0x0101010101010101ull;
}

// Attaches the STE backward to a fake-quantized output: identity (plain) or
// the saved in-range mask (clipped).
Tensor with_ste_backward(Tensor out, const Tensor& x, Tensor mask, SteKind ste) {
  if (ste == SteKind::plain)
    return record(out, "fake_quantize", {&x}, [](const Tensor& g, const NeedGrad&) { return TensorList{g}; });
  // dx = dy * mask (a product, as PyTorch's dY * mask: NaN in dy stays NaN).
  return record(out, "fake_quantize", {&x}, [mask](const Tensor& g, const NeedGrad&) {
    QAT_PROFILE("fake_quantize.backward");
    const uint8_t* __restrict pm_in = mask.data<uint8_t>();
    if (exclusively_owned(g) && g.sizes() == mask.sizes()) {
      // Clipping is rare: touch only the clipped elements of the gradient
      // (reads 1 byte per element instead of writing a new tensor). The
      // product keeps PyTorch's semantics (NaN or inf times 0 is NaN).
      // The mask is read 64 bytes at a time; only a block holding a 0 is
      // walked byte by byte (a byte loop with a branch does not vectorise).
      float* __restrict pg = g.data<float>();
      const int64_t n = g.numel(), blocks = (n + 63) / 64;
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i0 = 64 * b, i1 = std::min(n, i0 + 64);
        if (i1 - i0 == 64 && all_pass(pm_in + i0)) continue;
        for (int64_t i = i0; i < i1; ++i)
          if (pm_in[i] == 0) pg[i] *= 0.f;
      }
      return TensorList{g};
    }
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(mask.sizes());
    const float* __restrict pg = gc.data<float>();
    const uint8_t* __restrict pm = mask.data<uint8_t>();
    float* __restrict pd = dx.data<float>();
    const int64_t n = dx.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) pd[i] = math::ste_grad(pg[i], pm[i]);
    return TensorList{dx};
  });
}

FakeQuantPlan plan_fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                 const QuantSpec& spec) {
  FakeQuantPlan p;
  if (x.defined() && (!spec.per_channel || spec.axis < x.dim()))
    p.layout = ChannelLayout::of(x, spec.per_channel, spec.axis);
  check_qparams(x, scale, zero_point, spec, p.layout.channels);
  // qparams on the CPU are read there for an input on either device.
  if (scale.device() != Device::cpu || zero_point.device() != Device::cpu)
    qat::detail::check_same_device("fake_quantize",
                                   {{"input", &x}, {"scale", &scale}, {"zero_point", &zero_point}});
  const int32_t qmin_i = spec.qmin(), qmax_i = spec.qmax();
  QAT_CHECK(qmin_i < qmax_i, "fake_quantize: bad range [", qmin_i, ", ", qmax_i, "] from ", spec.describe());

  // Per-channel constants (C is small): scale, 1/scale (float, as PyTorch), zero point as float.
  const Tensor sc = scale.to(Device::cpu).contiguous(), zc = zero_point.to(Device::cpu).contiguous();
  const float* ps = sc.data<float>();
  const int32_t* pz = zc.data<int32_t>();
  const int64_t C = p.layout.channels;
  p.s.resize(C);
  p.inv.resize(C);
  p.z.resize(C);
  for (int64_t c = 0; c < C; ++c) {
    QAT_CHECK(ps[c] > 0.f && std::isfinite(ps[c]), "fake_quantize: scale must be positive and finite, got ", ps[c],
              " (channel ", c, ")");
    QAT_CHECK(pz[c] >= qmin_i && pz[c] <= qmax_i, "fake_quantize: zero_point ", pz[c], " (channel ", c,
              ") outside [", qmin_i, ", ", qmax_i, "]");
    p.s[c] = ps[c];
    p.inv[c] = 1.0f / ps[c];
    p.z[c] = static_cast<float>(pz[c]);
  }
  p.qmin = static_cast<float>(qmin_i);
  p.qmax = static_cast<float>(qmax_i);
  return p;
}

Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, const QuantSpec& spec,
                     SteKind ste) {
  QAT_PROFILE("fake_quantize.forward");
#if QAT_WITH_CUDA
  if (x.defined() && x.device() == Device::cuda) return cuda_twin::fake_quantize(x, scale, zero_point, spec, ste);
#endif
  const FakeQuantPlan p = plan_fake_quantize(x, scale, zero_point, spec);
  const ChannelLayout& l = p.layout;
  const float *s = p.s.data(), *inv = p.inv.data(), *z = p.z.data();
  const float qmin = p.qmin, qmax = p.qmax;

  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes());
  const bool need_mask = ste == SteKind::clipped && any_requires_grad({&x});
  Tensor mask = need_mask ? Tensor::empty(x.sizes(), DType::u8) : Tensor();
  if (need_mask)
    fq_forward<true>(xc.data<float>(), out.data<float>(), mask.data<uint8_t>(), l, s, inv, z, qmin, qmax);
  else
    fq_forward<false>(xc.data<float>(), out.data<float>(), nullptr, l, s, inv, z, qmin, qmax);

  return with_ste_backward(out, x, mask, ste);
}

namespace {

// Per-channel (axis 0) weights, observer on, an observer with a channel fold
// (observer.h: ChannelMinMaxFold): one pass over memory. Each channel's row is
// reduced to its min/max, folded into the observer, turned into qparams and
// fake-quantized while it is still in cache. Same results as observe()
// followed by fake_quantize(): channels are independent in both.
Tensor fused_rows(ChannelMinMaxFold& fold, const QuantSpec& spec, const Tensor& x, SteKind ste, QParams* used) {
  QAT_PROFILE("fake_quantize.fused_rows");
  const int64_t C = x.size(0), L = x.numel() / C;
  ChannelRows rows(spec, x.sizes(), ste == SteKind::clipped && any_requires_grad({&x}));
  const float* px = x.data<float>();
  std::exception_ptr error;
#pragma omp parallel for schedule(static) if (x.numel() > detail::kParallelGrain)
  for (int64_t c = 0; c < C; ++c) {
    float lo, hi;
    fold.fold_row(c, px + c * L, L, lo, hi);
    try {
      rows.row(c, px + c * L, lo, hi);
    } catch (...) {
#pragma omp critical
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  fold.end_fold();
  if (used) *used = rows.qparams();
  return rows.finish(x, ste);
}

}  // namespace

Tensor observe_and_fake_quantize(Observer& obs, const Tensor& x, SteKind ste, QParams* used) {
  const QuantSpec& spec = obs.spec();
  ChannelMinMaxFold* fold = obs.enabled ? obs.channel_fold() : nullptr;
  if (fold && spec.per_channel && spec.axis == 0 && x.defined() && x.dtype() == DType::f32 &&
      x.device() == Device::cpu && x.dim() >= 2 && x.is_contiguous() && x.size(0) == obs.channels() && x.numel() > 0)
    return fused_rows(*fold, spec, x, ste, used);
  obs.observe(x);
  QParams q = obs.qparams();
  Tensor y = fake_quantize(x, q.scale, q.zero_point, obs.spec(), ste);
  if (used) *used = std::move(q);
  return y;
}

}  // namespace qat::quant
