#pragma once
// Integer kernels of the frozen model (docs/math/requantization.md). Activations are NHWC
// uint8: a signed grid is stored shifted by +128 (q_stored = q + 128, with the
// zero point shifted alike), so one u8 x s8 GEMM serves both and every
// difference (q - z) is unchanged. No floating point in any of these kernels
// except quantize_input (the network's float input) and dequantize_rows (its
// float logits): the two ends of the integer network.
#include <cstdint>
#include <vector>

#include "core/aligned_vector.h"
#include "core/window.h"
#include "quant/integer/byte_layout.h"
#include "quant/integer/requant.h"

namespace qat::quant {

// (The patches of an NHWC image, im2row_u8 and its padded form: byte_layout.h.)

// Output stage of one row of int32 accumulators (n output channels):
//   out[c] = clamp(z_out + requant(acc[c] + bias[c], m0[c], shift[c], residual[c]), lo, hi)
// requant(x) = floor((x * M0 + residual) / 2^(31 + shift) + 1/2) (a rounding
// right shift, ties upwards, as TFLite's 64-bit requantization), from the
// exact 64-bit product. residual (|residual| <= M0 / 2) carries
// the fraction the int32 bias round(b / (s_x s_w)) dropped, so the integer
// model adds the bias as exactly as the float model does (the int32 bias
// rounding alone moves outputs by one step, most often on coarse 4-bit grids
// where M is large). The product: the doubling high multiply and the rounding
// right shift of gemmlowp fused into ONE rounding. (Two roundings, as
// gemmlowp's SaturatingRoundingDoublingHighMul + RoundingDivideByPOT, are one
// off whenever the first result lands exactly on a tie of the second, which
// small shifts, i.e. coarse 4-bit output grids, make frequent.) For a power-of-two
// multiplier (M0 = 2^30) this is a pure rounding shift by shift + 1.
// The vectorised path equals the scalar one.
struct RequantParams {
  const int32_t* bias;
  const int32_t* m0;
  const int32_t* shift;
  const int32_t* residual;
  int32_t out_zero, lo, hi;  // stored (u8) domain
};
// The per-layer constants of the vectorised path, built once: the bias, the
// residual and the rounding half folded into one 64-bit addend per channel,
// lanes laid out as the even/odd 64-bit halves of a 16-channel block. When
// every multiplier is a power of two (M0 = 2^30: power-of-two scales) the
// plan is a pure shift instead: (acc + floor(addend / 2^30)) >> (shift + 1)
// in 32 bits, which is the same integer (acc is an integer).
struct RequantPlan {
  RequantParams params{};
  int64_t n = 0;
  bool vector = false;  // AVX2 (8 channels a step) or, with avx512, AVX-512BW (16)
  bool avx512 = false;
  bool pure_shift = false;  // every M a power of two: y = (acc + add32) >> e, 32-bit
  std::vector<int32_t> add32, e;
  std::vector<int32_t> m0;
  std::vector<int64_t> add_even, add_odd, t_even, t_odd;
  // The AVX-512 path's constants, one block of 16 channels each (one
  // pointer a vector): the multipliers, and again one channel on (the odd
  // channels' in the low halves of 64-bit lanes); the even and odd
  // channels' addends and shifts. With `high` (every t = 31 + shift >= 32)
  // the odd shifts are t - 32; with `zero_in_addend` (every t <= 52) the
  // addends hold z_out 2^t too.
  struct alignas(64) Block16 {
    int32_t m0[16], m0_next[16];
    int64_t add_even[8], add_odd[8], t_even[8], t_odd[8];
  };
  bool high = false, zero_in_addend = false;
  AlignedVector<Block16> blocks;
  // The AVX-512 path's float first pass (Note [checked float
  // requantization]): per channel M = m0 2^-t and B = addend 2^-t + z -
  // 2^-11 as floats, padded to 16; taken where every |B| <= 1792.
  bool float_first = false;
  AlignedVector<float> fm, fb;
};
// p's arrays must outlive the plan; 0 <= p.lo <= p.hi <= 255 (else an error).
RequantPlan make_requant_plan(const RequantParams& p, int64_t n);
// `rows` consecutive rows of n (acc and out row-major); every |acc| < 2^30
// (what a layer's K allows: IntLayer::products_per_output), on which the
// vector paths' exactness rests (Note [checked float requantization]).
void requantize_rows(const int32_t* acc, int64_t rows, const RequantPlan& plan, uint8_t* out);
void requantize_row_reference(const int32_t* acc, int64_t n, const RequantParams& p, uint8_t* out);
// Scalar requant of one value (the specification): exactly floor(x M + r + 1/2)
// for M = M0 2^(-31-shift), r = residual 2^(-31-shift), saturated to int32.
int32_t requantize_value(int32_t acc, int32_t m0, int32_t shift, int32_t residual = 0);
// The same with a 64-bit addend (|extra| < 2^61): rows whose correction
// depends on the input (fractional weight zero points).
int32_t requantize_value64(int32_t acc, int32_t m0, int32_t shift, int64_t extra);

// Max pooling on NHWC u8 (padding never wins, as -inf in float).
struct PoolShape {
  int64_t n, h, w, c, kh, kw, stride_h, stride_w, pad_h, pad_w, out_h, out_w;
};
// A max pool's geometry over n images of h x w x c (its output size checked
// as conv_out_size checks it).
PoolShape max_pool_shape(const Pool2dParams& p, int64_t n, int64_t h, int64_t w, int64_t c);
void max_pool_u8(const uint8_t* x, const PoolShape& s, uint8_t* y);
// Adaptive average pooling on NHWC u8 with PyTorch's bins; each output is
// floor(sum / count + 1/2), the mean rounded half up (values are non-negative).
void adaptive_avg_pool_u8(const uint8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t out_h, int64_t out_w,
                          uint8_t* y);

// Float NCHW -> stored u8 NHWC: q = clamp(nearbyint(x * (1/scale) + frac) + z, qmin, qmax) + offset,
// exactly the fake-quant rounding (PyTorch's) when frac = 0 (LSQ+: frac is the
// zero point's fraction, x/s + z + frac = (x - beta)/s).
void quantize_input(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float scale, int32_t zero_point,
                    float frac, int32_t qmin, int32_t qmax, int32_t offset, uint8_t* y);

}  // namespace qat::quant
