#pragma once
// IntegerModel: the frozen network (what freeze() builds and `qat export`
// writes). A flat list of integer layers run in order:
//   quantize_input  float NCHW -> u8 NHWC (the only float input)
//   conv            u8 NHWC -> u8 NHWC   int8 weights (any 2..8 bits), int32 bias, dense or depthwise,
//                                        per-channel fixed-point requantization,
//                                        ReLU as the lower clamp
//   linear          u8 (N, K) -> u8 (N, C), or float logits when it is the
//                                        last layer (dequantize: the only float output)
//   max_pool / adaptive_avg_pool / relu  u8 -> u8 on the same grid
//   flatten         u8 NHWC -> u8 (N, C*H*W) in PyTorch's (c, h, w) order
// Between quantize_input and the final dequantization every tensor is an
// integer tensor and every kernel integer arithmetic (docs/math/requantization.md §2-5):
//   acc[c]  = Σ_k (x_k - z_x)(w_ck - z_w[c])        (int32; padding = z_x)
//   y[c]    = clamp(z_y + requant(acc[c] + bias[c], M0[c], shift[c], residual[c]), lo, hi)
//   bias[c] = round(b[c] / (s_x s_w[c])),  M[c] = s_x s_w[c] / s_y = M0 2^(-31-shift)
//   residual[c] = round((b[c] / (s_x s_w[c]) - bias[c]) M0): the bias fraction
//             in the 64-bit product's units (int_kernels.h)
// A fractional weight zero point f_w (LSQ+) adds -f_w[c] Σ_k (x_k - z_x) per
// output, a term that depends on the input row: those layers take a per-row
// scalar output path (round(f_w M0) times the row sum, in 64 bits).
// Signed activation grids are stored as u8 shifted by +128 (see int_kernels.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/window.h"
#include "quant/integer/int8_gemm.h"
#include "quant/integer/int8_gemm_packed.h"
#include "quant/integer/int_add.h"
#include "quant/integer/int_op.h"

namespace qat::quant {

// Products one output of a conv / linear layer may sum: |acc| <= K * 255 * 255
// ((x - z_x) and (w - z_w) within 255) stays below 2^30, so adding a bias
// below 2^30 never overflows int32.
constexpr int64_t kMaxProducts = 16384;

// Quantization of one activation tensor (zero point and range in the grid's
// own domain: signed grids are negative at the bottom).
struct ActQuant {
  float scale = 1.f;
  int32_t zero_point = 0;
  // The real zero point is zero_point + zero_frac (|zero_frac| <= 1/2): LSQ+
  // learns a continuous offset beta, z = -beta / s. Folded into the biases at
  // freeze (conv/linear) and kept through average pooling; 0 for every
  // other method.
  float zero_frac = 0.f;
  int bits = 8;
  bool is_signed = false;
  int32_t qmin() const { return is_signed ? -(1 << (bits - 1)) : 0; }
  int32_t qmax() const { return is_signed ? (1 << (bits - 1)) - 1 : (1 << bits) - 1; }
  int32_t offset() const { return is_signed ? 128 : 0; }  // stored = q + offset
  bool operator==(const ActQuant&) const = default;
  // scale > 0 and finite, bits in 2..8, zero point on the grid, |zero_frac| <= 1/2.
  bool valid() const;
};

// A layer's inputs after its first: an add's second, a concat's others.
using MoreInputs = std::vector<const Tensor*>;

struct IntLayer {
  IntOp op = IntOp::relu;
  std::string name;  // module name in the float/QAT model, e.g. "features.0"
  ActQuant in, out;  // out unused when dequantize
  // Note [integer model graph]: the earlier layers whose outputs this one
  // reads, by index; empty: the layer before it (a chain; the first layer
  // reads the model's input). An add reads two: in is the first's grid, in2
  // the second's.
  std::vector<int64_t> inputs;
  ActQuant in2;
  AddRequant add;  // add: derived at finalize from in, in2, out and relu
  // concat (Note [integer concat]): each input's grid (in: the first's), and
  // derived at finalize, each one's requantization onto out.
  std::vector<ActQuant> concat_in;
  std::vector<AddRequant> concat_requant;
  // The grid of input k (0: in; an add's second: in2; a concat's: concat_in).
  const ActQuant& input_grid(size_t k) const;
  // conv / linear
  int64_t in_channels = 0, out_channels = 0, kernel_h = 1, kernel_w = 1;
  // groups 1, or depthwise: groups = in_channels = out_channels (weights
  // (C, KH, KW, 1); one window of its own channel per output, Note [integer
  // depthwise convolution])
  Conv2dParams conv;
  bool depthwise() const { return conv.groups > 1; }
  int weight_bits = 8;
  bool weight_signed = true;  // the weight grid: [-2^(b-1), 2^(b-1)-1] or [0, 2^b - 1]
  int32_t weight_qmin() const { return weight_signed ? -(1 << (weight_bits - 1)) : 0; }
  int32_t weight_qmax() const { return weight_signed ? (1 << (weight_bits - 1)) - 1 : (1 << weight_bits) - 1; }
  Tensor weight;             // i8: conv (Cout, KH, KW, Cin), linear (Cout, Cin)
  Tensor weight_scale;       // f32 (Cout)
  Tensor weight_zero_point;  // i32 (Cout)
  Tensor weight_zero_frac;   // f32 (Cout): fractional part of the weight zero points (LSQ+ offsets), else 0
  Tensor bias;               // i32 (Cout)
  Tensor multiplier, shift;  // i32 (Cout); unused when dequantize
  Tensor bias_residual;      // i32 (Cout); unused when dequantize
  bool relu = false;         // folded into the lower clamp
  // A ReLU6 (with relu): the upper clamp, the output grid's value of 6.0
  // (Note [ReLU6 as a clamp]); INT32_MAX: none (the grid's qmax).
  int32_t clamp_max = INT32_MAX;
  int32_t out_hi() const { return std::min(out.qmax(), clamp_max); }
  bool dequantize = false;   // last layer: float logits = (acc + bias) * s_x * s_w[c]
  // pools
  Pool2dParams pool{};
  int64_t out_h = 0, out_w = 0;  // adaptive_avg_pool

  // Derived at load/freeze (not stored): Σ_k w[c][k] per channel, and the
  // weights repacked for the packed kernels (int8_gemm_packed.h) when any
  // kernel here takes them, so that a kernel other than the best one
  // (--int8-kernel, the tests) runs packed too. Output channels are padded
  // with zero weights to a multiple of 16 (MobileNetV2's 24-channel
  // projections); the GEMM then writes the padded columns to a buffer.
  std::vector<int32_t> weight_row_sums;
  PackedB packed_weight;
  // K = kernel_h * kernel_w * in_channels / groups of a conv / linear layer; throws
  // naming the layer when a size is < 1 or K exceeds kMaxProducts.
  int64_t products_per_output() const;
  void finalize();  // its op's finalize (int_op.h): validates the fields, fills the derived ones
};

// The kernel layer l's GEMM runs on when the model's is k: k, but for a
// 1x1 convolution or linear layer of fewer than 64 products an output on AMX,
// which goes to AVX-512 VNNI (Note [AMX and short sums], integer_model.cpp).
GemmKernel layer_gemm_kernel(const IntLayer& l, GemmKernel k);
// Whether layer l multiplies on its packed weights with kernel k.
bool runs_packed(const IntLayer& l, GemmKernel k);
// The ranges of a conv / linear layer's GEMM operands: its input grid's
// stored values (at most qmax + offset) and its weight grid.
GemmRanges gemm_ranges(const IntLayer& l);

class IntegerModel {
 public:
  std::vector<IntLayer> layers;
  GemmKernel kernel = best_gemm_kernel();

  // x: normalised float images (N, 3, H, W) -> float logits (N, classes).
  Tensor forward(const Tensor& x) const;
  // Output of every layer (u8 tensors, the last f32 logits), for compare-layers.
  std::vector<Tensor> forward_trace(const Tensor& x) const;
  // One layer: integer tensor in, integer tensor out (f32 only at the ends).
  // x must hold values on l.in's grid (stored q + offset, q in [qmin, qmax]),
  // as the layer before writes them: a conv / linear layer's GEMM relies on
  // it (gemm_ranges; off-grid bytes give other sums on some kernels).
  // more: the inputs after x (an add's second, a concat's others).
  Tensor run_layer(const IntLayer& l, const Tensor& x, const MoreInputs& more = {}) const;
  int64_t num_classes() const;
  // The GEMM kernel a layer runs on, e.g. "amx, packed weights" or
  // "avx512_vnni"; empty for a layer without a GEMM.
  std::string layer_kernel(const IntLayer& l) const;
};

// Conv weight layouts: PyTorch's (O, I, KH, KW) and the kernels' (O, KH, KW, I)
// (patch rows of NHWC images); int8.
Tensor weight_ohwi_from_oihw(const Tensor& oihw);
Tensor weight_oihw_from_ohwi(const Tensor& ohwi);

// The grid values (q, not stored) of a u8 activation tensor as NCHW int32,
// for comparisons with a float model.
Tensor activation_values_nchw(const Tensor& stored_nhwc, const ActQuant& q);

}  // namespace qat::quant
