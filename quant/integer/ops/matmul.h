#pragma once
// The matrix-multiplying integer ops (conv, linear): their shared GEMM call,
// output stage and field checks. Not part of the integer model's interface.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "quant/integer/int8_gemm_packed.h"
#include "quant/integer/int_kernels.h"
#include "quant/integer/int_math.h"
#include "quant/integer/integer_model.h"

namespace qat::quant::ops {

inline bool any_nonzero(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::any_of(p, p + t.numel(), [](int32_t v) { return v != 0; });
}

// The layer's requantization of accumulators plus `bias` (per channel):
// multipliers, the output grid's zero point and clamp (a ReLU: from the zero point).
inline RequantParams requant_params(const IntLayer& l, const int32_t* bias) {
  const int32_t off = l.out.offset();
  return {bias,
          l.multiplier.data<int32_t>(),
          l.shift.data<int32_t>(),
          l.bias_residual.data<int32_t>(),
          l.out.zero_point + off,
          (l.relu ? std::max(l.out.qmin(), l.out.zero_point) : l.out.qmin()) + off,
          l.out_hi() + off};
}

// Whether a fractional weight zero point (LSQ+) is not 0.
inline bool has_weight_frac(const IntLayer& l) {
  const float* fw = l.weight_zero_frac.data<float>();
  return std::any_of(fw, fw + l.out_channels, [](float f) { return f != 0.f; });
}

// round(f_w[c] M0[c]) per channel: that term in the requantization's units
// (times the window's Σ (x - z_x)); empty when every f_w is 0.
inline std::vector<int64_t> fractional_weight_m0(const IntLayer& l) {
  if (!has_weight_frac(l)) return {};
  std::vector<int64_t> out(static_cast<size_t>(l.out_channels));
  for (int64_t c = 0; c < l.out_channels; ++c)
    out[c] = std::llround(static_cast<double>(l.weight_zero_frac.data<float>()[c]) * l.multiplier.data<int32_t>()[c]);
  return out;
}

// The output stage of conv and linear: zero-point corrections, then
// requantization to u8 or (last layer) dequantization to float.
struct OutputStage {
  const IntLayer& l;
  int64_t K;
  int64_t lda;                // bytes between the input rows A (K or more)
  std::vector<int32_t> bias;  // bias - z_x Σw + K z_x z_w
  bool weight_zero_points, weight_frac = false;
  std::vector<int64_t> frac_m0;  // round(f_w[c] M0[c]) (fractional weight zero points)
  std::vector<float> dequant;    // s_x s_w[c] (dequantize only)
  RequantParams rq{};
  RequantPlan plan;

  OutputStage(const IntLayer& layer, int64_t k, int64_t row_stride = 0)
      : l(layer), K(k), lda(row_stride ? row_stride : k) {
    const int64_t C = l.out_channels;
    const int32_t zx = l.in.zero_point + l.in.offset();
    const int32_t* zw = l.weight_zero_point.data<int32_t>();
    weight_zero_points = any_nonzero(l.weight_zero_point);
    bias.resize(C);
    for (int64_t c = 0; c < C; ++c)
      bias[c] = l.bias.data<int32_t>()[c] - zx * l.weight_row_sums[c] + static_cast<int32_t>(K) * zx * zw[c];
    if (l.dequantize) {
      dequant.resize(C);
      for (int64_t c = 0; c < C; ++c)
        dequant[c] = static_cast<float>(static_cast<double>(l.in.scale) * l.weight_scale.data<float>()[c]);
    } else {
      rq = requant_params(l, bias.data());
      plan = make_requant_plan(rq, C);
    }
    weight_frac = has_weight_frac(l);
    if (weight_frac && !l.dequantize) frac_m0 = fractional_weight_m0(l);
  }

  // Rows of accumulators (C each) for the input rows A (K each, lda apart): zero-point
  // corrections, then the output: u8 rows to `out` (C per row), or float
  // logits to fout[r * fstep + c * fstride].
  // Whether finish reads the input rows A (their sums: weight zero points,
  // fractional ones, or a dequantized output); else A may be null.
  bool needs_rows() const { return weight_zero_points || weight_frac || l.dequantize; }

  void finish(int32_t* acc, const uint8_t* A, int64_t rows, uint8_t* out, float* fout, int64_t fstep,
              int64_t fstride) const {
    if (!needs_rows()) return requantize_rows(acc, rows, plan, out);
    const int64_t C = l.out_channels;
    const int32_t* zw = l.weight_zero_point.data<int32_t>();
    const int32_t zx = l.in.zero_point + l.in.offset();
    for (int64_t r = 0; r < rows; ++r) {
      int32_t* a = acc + r * C;
      int64_t centred = 0;  // Σ_k (x_k - z_x)
      if (weight_zero_points || weight_frac) {
        int64_t xs = 0;
        for (int64_t k = 0; k < K; ++k) xs += A[r * lda + k];
        if (weight_zero_points)
          for (int64_t c = 0; c < C; ++c) a[c] -= zw[c] * static_cast<int32_t>(xs);
        centred = xs - K * zx;
      }
      if (l.dequantize) {
        const float* fw = l.weight_zero_frac.data<float>();
        for (int64_t c = 0; c < C; ++c)
          fout[r * fstep + c * fstride] =
              int_math::dequantize_value(a[c] + bias[c], fw[c], static_cast<float>(centred), dequant[c]);
      } else if (weight_frac) {
        for (int64_t c = 0; c < C; ++c) {
          const int64_t extra = rq.residual[c] - frac_m0[c] * centred;
          const int32_t v = rq.out_zero + requantize_value64(a[c] + bias[c], rq.m0[c], rq.shift[c], extra);
          out[r * C + c] = static_cast<uint8_t>(std::clamp(v, rq.lo, rq.hi));
        }
      } else {
        requantize_rows(a, 1, plan, out + r * C);
      }
    }
  }
};

// acc (M x out_channels) = rows (M x K, lda apart; 0: K) . weights^T; the
// packed broadcast kernel where the layer has one (same integers as every
// other kernel). zero_tail: the rows hold zeros from K to lda.
void gemm(const IntLayer& l, GemmKernel kernel, int64_t M, const uint8_t* rows, int32_t* acc, int64_t lda = 0,
          bool zero_tail = false);

// Whether gemm_window runs the layer on `kernel` with runs of `run` bytes.
bool runs_window(const IntLayer& l, GemmKernel kernel, int64_t run);
// The same product as gemm for rows read in place from a padded image
// (gemm_u8s8s32_packed_window); where runs_window.
void gemm_window(const IntLayer& l, GemmKernel kernel, int64_t M, const WindowRows& rows, int32_t* acc);

// Checks a conv / linear layer's fields and derives the weight row sums and
// the packed weights.
void finalize_matmul(IntLayer& l);

}  // namespace qat::quant::ops
