#pragma once
// Per-channel fake quantization of a weight a row at a time, each row on its
// own channel's qparams, with the clipped STE's mask kept as bits: the pass
// behind observe_and_fake_quantize's fused weight path (fake_quant.cpp) and
// the weight lookahead (weight_lookahead.h). Internal to quant/sim.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "quant/qparams.h"
#include "quant/sim/fq_rows.h"
#include "quant/sim/math.h"
#include "quant/spec.h"

namespace qat::quant {

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


// The clipped STE's mask as bits: bit j of word w of a row is element
// 16 w + j of the row (1: the gradient passes). 1/32 of the float traffic
// of the weight, against 1/4 for a byte mask (written every forward, read
// every backward).
struct RowBits {
  int64_t rows = 0, len = 0, words = 0;  // words per row: ceil(len / 16)
  std::vector<uint16_t> bits;
  RowBits(int64_t r, int64_t l) : rows(r), len(l), words((l + 15) / 16), bits(static_cast<size_t>(r * words)) {}
};

// The STE backward on a fake-quantized output: identity (plain) or dy times
// the saved byte mask (clipped; fake_quant.cpp).
Tensor with_ste_backward(Tensor out, const Tensor& x, Tensor mask, SteKind ste);
// The clipped STE on a bit mask.
Tensor with_ste_bits(Tensor out, const Tensor& x, std::shared_ptr<const RowBits> m);

// The rows of a [C, ...] tensor (C rows of L = numel / C values) fake-quantized
// into a fresh output, row c on the qparams of its range [lo, hi]
// (qparams_from_range); with `mask`, the clipped STE's bits are kept.
class ChannelRows {
 public:
  ChannelRows(const QuantSpec& spec, const Shape& sizes, bool mask);
  // Row c (L values at `row`): its qparams (throws as qparams_from_range
  // does), then the row fake-quantized. Distinct rows may run concurrently.
  void row(int64_t c, const float* row, float lo, float hi);
  const QParams& qparams() const { return q_; }
  bool has_mask() const { return bits_ != nullptr; }
  // The output, with the STE backward to x attached (the bits where x needs a
  // gradient under the clipped STE: has_mask() must then hold).
  Tensor finish(const Tensor& x, SteKind ste);

 private:
  QuantSpec spec_;
  int64_t rows_, len_;
  float qmin_, qmax_;
  Tensor out_;
  QParams q_;
  std::shared_ptr<RowBits> bits_;
  bool stream_;
  FqRowsKernel kernel_;
};

}  // namespace qat::quant
