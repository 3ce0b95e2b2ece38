#include "quant/sim/fake_quant.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <vector>

#include "core/ops/common.h"
#include "quant/observe/channel_layout.h"
#include "quant/sim/math.h"

namespace qat::quant {

namespace {

constexpr int64_t kBlock = int64_t{1} << 14;  // elements per parallel work item

// Note [fake-quant arithmetic] (math.h) for the per-element rule.
template <bool kMask>
inline void fq_span(const float* __restrict x, float* __restrict y, uint8_t* __restrict m, int64_t n, float s,
                    float inv, float z, float qmin, float qmax) {
  for (int64_t i = 0; i < n; ++i) {
    const float q = math::fake_quant_grid(x[i], inv, z);
    y[i] = math::fake_quant_dequant(q, s, z, qmin, qmax);
    if constexpr (kMask) m[i] = static_cast<uint8_t>(math::ste_passes(q, qmin, qmax));
  }
}

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
  detail::check_f32(x, "fake_quantize", "input");
  detail::check_f32(scale, "fake_quantize", "scale");
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
      float* __restrict pg = g.data<float>();
      const int64_t n = g.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
      for (int64_t i = 0; i < n; ++i)
        if (pm_in[i] == 0) pg[i] *= 0.f;
      return TensorList{g};
    }
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(mask.sizes());
    const float* __restrict pg = gc.data<float>();
    const uint8_t* __restrict pm = mask.data<uint8_t>();
    float* __restrict pd = dx.data<float>();
    const int64_t n = dx.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) pd[i] = pg[i] * static_cast<float>(pm[i]);
    return TensorList{dx};
  });
}

}  // namespace

Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, const QuantSpec& spec,
                     SteKind ste) {
  QAT_PROFILE("fake_quantize.forward");
  const ChannelLayout l = x.defined() && (!spec.per_channel || spec.axis < x.dim())
                              ? ChannelLayout::of(x, spec.per_channel, spec.axis)
                              : ChannelLayout{};
  check_qparams(x, scale, zero_point, spec, l.channels);
  const int32_t qmin_i = spec.qmin(), qmax_i = spec.qmax();
  QAT_CHECK(qmin_i < qmax_i, "fake_quantize: bad range [", qmin_i, ", ", qmax_i, "] from ", spec.describe());

  // Per-channel constants (C is small): scale, 1/scale (float, as PyTorch), zero point as float.
  const Tensor sc = scale.contiguous(), zc = zero_point.contiguous();
  const float* ps = sc.data<float>();
  const int32_t* pz = zc.data<int32_t>();
  std::vector<float> s(l.channels), inv(l.channels), z(l.channels);
  for (int64_t c = 0; c < l.channels; ++c) {
    QAT_CHECK(ps[c] > 0.f && std::isfinite(ps[c]), "fake_quantize: scale must be positive and finite, got ", ps[c],
              " (channel ", c, ")");
    QAT_CHECK(pz[c] >= qmin_i && pz[c] <= qmax_i, "fake_quantize: zero_point ", pz[c], " (channel ", c,
              ") outside [", qmin_i, ", ", qmax_i, "]");
    s[c] = ps[c];
    inv[c] = 1.0f / ps[c];
    z[c] = static_cast<float>(pz[c]);
  }
  const float qmin = static_cast<float>(qmin_i), qmax = static_cast<float>(qmax_i);

  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.sizes());
  const bool need_mask = ste == SteKind::clipped && any_requires_grad({&x});
  Tensor mask = need_mask ? Tensor::empty(x.sizes(), DType::u8) : Tensor();
  if (need_mask)
    fq_forward<true>(xc.data<float>(), out.data<float>(), mask.data<uint8_t>(), l, s.data(), inv.data(), z.data(),
                     qmin, qmax);
  else
    fq_forward<false>(xc.data<float>(), out.data<float>(), nullptr, l, s.data(), inv.data(), z.data(), qmin, qmax);

  return with_ste_backward(out, x, mask, ste);
}

namespace {

// Per-channel (axis 0) weights, observer on, an observer with a channel fold
// (observer.h: ChannelMinMaxFold): one pass over memory. Each channel's row is
// reduced to its min/max, folded into the observer, turned into qparams and
// fake-quantized while it is still in cache. Same results as observe()
// followed by fake_quantize(): channels are independent in both.
Tensor fused_rows(Observer& obs, ChannelMinMaxFold& fold, const Tensor& x, SteKind ste, QParams* used) {
  QAT_PROFILE("fake_quantize.fused_rows");
  const QuantSpec& spec = obs.spec();
  const int64_t C = x.size(0), L = x.numel() / C;
  const bool need_mask = ste == SteKind::clipped && any_requires_grad({&x});
  Tensor out = Tensor::empty(x.sizes());
  Tensor mask = need_mask ? Tensor::empty(x.sizes(), DType::u8) : Tensor();
  QParams q{Tensor::empty({C}), Tensor::empty({C}, DType::i32)};
  const float* px = x.data<float>();
  float* py = out.data<float>();
  uint8_t* pm = need_mask ? mask.data<uint8_t>() : nullptr;
  const float qmin = static_cast<float>(spec.qmin()), qmax = static_cast<float>(spec.qmax());
  std::exception_ptr error;
#pragma omp parallel for schedule(static) if (x.numel() > detail::kParallelGrain)
  for (int64_t c = 0; c < C; ++c) {
    const float* row = px + c * L;
    float lo, hi;
    fold.fold_row(c, row, L, lo, hi);
    float sc;
    int32_t zp;
    try {
      qparams_from_range(spec, lo, hi, sc, zp);
    } catch (...) {
#pragma omp critical
      error = std::current_exception();
      continue;
    }
    q.scale.data<float>()[c] = sc;
    q.zero_point.data<int32_t>()[c] = zp;
    const float z = static_cast<float>(zp);
    if (pm) fq_span<true>(row, py + c * L, pm + c * L, L, sc, 1.0f / sc, z, qmin, qmax);
    else fq_span<false>(row, py + c * L, nullptr, L, sc, 1.0f / sc, z, qmin, qmax);
  }
  if (error) std::rethrow_exception(error);
  fold.end_fold();
  if (used) *used = q;
  return with_ste_backward(out, x, mask, ste);
}

}  // namespace

Tensor observe_and_fake_quantize(Observer& obs, const Tensor& x, SteKind ste, QParams* used) {
  const QuantSpec& spec = obs.spec();
  ChannelMinMaxFold* fold = obs.enabled ? obs.channel_fold() : nullptr;
  if (fold && spec.per_channel && spec.axis == 0 && x.defined() && x.dtype() == DType::f32 && x.dim() >= 2 &&
      x.is_contiguous() && x.size(0) == obs.channels() && x.numel() > 0)
    return fused_rows(obs, *fold, x, ste, used);
  obs.observe(x);
  QParams q = obs.qparams();
  Tensor y = fake_quantize(x, q.scale, q.zero_point, obs.spec(), ste);
  if (used) *used = std::move(q);
  return y;
}

}  // namespace qat::quant
