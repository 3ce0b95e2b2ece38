#pragma once
// INT8 training ops (Zhu et al., CVPR 2020; docs/math/int8_training.md): a
// quantized convolution or linear layer whose three GEMMs run on integers.
//
// Note [INT8 training GEMMs]
// The layer's input x lies on an activation grid, x = s_x (u - zx) with u an
// integer in [0, levels) (stored u8; zx may be fractional: LSQ+), and its
// fake-quantized weight on a symmetric per-channel (or per-tensor) grid,
// wq[o][k] = s_w[o] W[o][k], W int8. With M = batch x output positions and
// K = the patch (C x KH x KW) or the input features:
//   forward   Y[m][o]  = s_x s_w[o] (sum_k u[m][k] W[o][k] - zx sum_k W[o][k])  (u8 x s8)
//   backward  dY is quantized twice, symmetric per tensor (s = clip / qmax),
//             with stochastic or nearest rounding:
//               G  = Q(dY)           for the weight gradient,
//               Gx = Q(dY * s_w[o])  for the input gradient (the per-channel
//                                    weight scales do not factor out of the
//                                    sum over o; with one weight scale Gx is
//                                    the same quantization of a scaled dY);
//             dWq[o][k] = s_G s_x (sum_m G[m][o] u[m][k] - zx sum_m G[m][o])   (u8 x s8)
//             dXq[m][k] = s_Gx sum_o Gx[m][o] W[o][k]                           (s8 x s8)
//             then col2im sums dXq into the input's pixels in int64 and
//             scales once: every gradient is ONE rounding of a double product
//             (double(s_a) * double(s_b)) * integer, so it equals the float
//             backward computed in double from the same integers exactly.
// The bias gradient is the float sum of dY. The weight and input gradients
// then flow through the fake quantizers' backward (STE / LSQ) as in QAT.
// The dW sum runs over M in chunks (of 2^16 rows unpacked, 4096 on the
// packed kernels: int32 accumulators, summed in int64), the others have
// short sums (K, O <= 2^16, checked).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/window.h"
#include "layers/module.h"
#include "quant/integer/int8_gemm.h"
#include "quant/int8_training/grad_quant.h"
#include "quant/int8_training/quant_codes.h"

namespace qat::quant {

// x = scale * (u - zero), u an integer in [0, levels).
struct ActGrid {
  float scale = 1.f;
  double zero = 0.0;
  int32_t levels = 256;
};

enum class GradClipping { max, direction_sensitive };
constexpr auto enum_names(GradClipping) {
  return std::to_array<EnumName<GradClipping>>(
      {{GradClipping::max, "max"}, {GradClipping::direction_sensitive, "direction_sensitive"}});
}

struct Int8GradConfig {
  int bits = 8;
  GradRounding rounding = GradRounding::stochastic;
  GradClipping clipping = GradClipping::direction_sensitive;
  int64_t period = 100;  // direction-sensitive clips are searched every `period` backward steps
  bool lr_scaling = true;
  double alpha = 20.0, beta = 0.1;
};

// The gradient quantizers of one INT8 layer (for dW and for dX) and what
// they measured. Buffers (in the state dict, so checkpoints carry them and
// --resume continues bit-exactly):
//   clip_dw, clip_dx        f32 (1)  the clip values in use (0: none yet)
//   ratio_dw, ratio_dx      f32 (1)  clip / max|g| of the last search
//   distance_dw, distance_dx f32 (1) 1 - cos(g, Q(g)) of the latest backward
//   lr_scale                f32 (1)  phi(distance_dw) (1 without LR scaling)
//   epoch_sums              f32 (5)  what take_means() averages
//   steps                   i32 (1)  backward steps taken: the period's clock
//                                    and, with the seed, the rounding noise's key
class Int8GradState : public Module {
 public:
  Int8GradState(const Int8GradConfig& cfg, uint64_t seed, std::string layer);
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Int8GradState"; }
  std::string describe() const override;
  const Int8GradConfig& config() const { return cfg_; }
  const std::string& layer() const { return layer_; }

  // What one backward does with its output gradient, for the ops below.
  // Quantizer `which` (0: dW, 1: dX) needs a new clip: every step under max
  // clipping, every `period` steps (and while it has none) under
  // direction-sensitive clipping.
  bool clip_due(int which) const;
  // Sets the clip from the gradient it will quantize (n values, any order):
  // the searched (or max) clip, and its ratio to max|g|.
  void refresh_clip(int which, const float* g, int64_t n);
  // The same under max clipping, from max|g| alone (max_abs: NaN if any);
  // the device twin's way, which then copies nothing to the host.
  void refresh_max_clip(int which, float max_abs_g);
  // Between searches the clip follows the gradient's magnitude: the last
  // searched ratio times this step's max|g| (gradients grow and shrink
  // by orders of magnitude within a period; a fixed clip would saturate
  // them or round them all to zero).
  void track_clip(int which, float max_abs_g);
  // clip / qmax: the gradient's scale (0 for an all-zero gradient).
  float grad_scale(int which) const;
  uint64_t noise_key(int which) const;
  void record(int which, const GradQuantStats& stats);
  // After the quantizers that ran this step (dW: the weight needed a
  // gradient; dX: the input did): lr_scale from this step's dW distance,
  // the epoch sums, steps + 1.
  void finish_step(bool had_dw, bool had_dx);

  float clip(int which) const;
  float distance(int which) const;
  float lr_scale() const { return lr_scale_.data<float>()[0]; }
  int64_t steps() const { return steps_.data<int32_t>()[0]; }

  // Means over the steps since the last call (the epoch), and a reset. The
  // sums are a checkpointed buffer: a run interrupted mid-epoch and resumed
  // logs the same means. count_dw / count_dx: steps that measured each.
  struct Means { double distance_dw = 0, distance_dx = 0, lr_scale = 0; int64_t count_dw = 0, count_dx = 0; };
  Means take_means();

  // Tests: keep the integers and scales of the last backward.
  bool keep_last = false;
  std::vector<int8_t> last_g, last_gx;  // G as (O, M), Gx as (M, O)
  std::vector<float> last_dy;           // the float output gradient G quantized (its layout)
  float last_scale_g = 0.f, last_scale_gx = 0.f;

 private:
  void check_finite_max(float m) const;
  void set_clip(int which, float c, float m);
  Int8GradConfig cfg_;
  uint64_t seed_;
  std::string layer_;
  Tensor clip_dw_, clip_dx_, ratio_dw_, ratio_dx_, distance_dw_, distance_dx_, lr_scale_, steps_;
  Tensor epoch_sums_;  // f32 (5): sum d_dw, sum d_dx, sum lr_scale, steps with dW, steps with dX
};

// Conv (groups 1) and linear with integer GEMMs, Note [INT8 training GEMMs].
// x: (N, C, H, W) / (N, K) float on `grid`; wq: the fake-quantized weight
// (O, C, KH, KW) / (O, K), w_scale its (O) or (1) scales (zero points 0);
// bias (O) or undefined. A value off its grid is an error naming `layer`.
Tensor int8_conv2d(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                   const Conv2dParams& p, const std::shared_ptr<Int8GradState>& state);
Tensor int8_linear(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                   const std::shared_ptr<Int8GradState>& state);

// The same layers fed by the weight quantizer directly: w is the float weight
// BEFORE fake quantization (the master weight, or the BN-folded one), codes
// its integers and scales (FakeQuantizer::forward_codes). The weight gradient
// goes to w through the clipped STE (codes->clipped): the fake-quantized
// float tensor is never formed, and the gradients equal those of the form
// above fed with fake_quantize(w) (bit for bit: the same integers).
Tensor int8_conv2d(const Tensor& x, const ActGrid& grid, const Tensor& w, std::shared_ptr<const QuantCodes> codes,
                   const Tensor& bias, const Conv2dParams& p, const std::shared_ptr<Int8GradState>& state);
Tensor int8_linear(const Tensor& x, const ActGrid& grid, const Tensor& w, std::shared_ptr<const QuantCodes> codes,
                   const Tensor& bias, const std::shared_ptr<Int8GradState>& state);

// Note [integer forward of QAT layers]
// quant.integer_forward: a QAT layer's forward conv2d(x, wq, bias) (or
// linear) computed as INT8 training's forward is (above): x's integers u on
// its grid, the int8 GEMM (VNNI / AMX on the CPU, DP4A on cuda), each output
// dequantized once, s_x s_w[o] (sum_k u W - zx sum_k W) + bias; no float
// patch matrix, no float GEMM. It is the exact sum rounded once, so it
// differs from the float op on the same operands only by the float op's own
// rounding (tests bound it by the float-sum error). The backward is the
// float op's own (conv2d_backward / linear_backward on x and wq): QAT's
// gradients, bit for bit. Same operand rules as INT8 training (symmetric
// weights of at most 8 bits, groups 1 or depthwise, x on one per-tensor grid of at most
// 256 levels); a value off the grid is an error naming `layer`.
Tensor int_forward_conv2d(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                          const Tensor& bias, const Conv2dParams& p, const std::string& layer);
Tensor int_forward_linear(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                          const Tensor& bias, const std::string& layer);

// The errors of an integer layer's operands, shared by the CPU ops and their
// device twins (int8_device.h) so that both name the same layer, value and
// place. who: "int8 training: layer L" or "quant.integer_forward: layer L".
std::string int8_training_who(const std::string& layer);  // "int8 training: layer L"
void check_weight_scales(const std::string& who, int64_t scales, int64_t out_channels);
[[noreturn]] void fail_input_off_grid(const std::string& who, float value, int64_t index, const ActGrid& grid);
// Row o of the weight (k values of scale s) failed the on-grid check: names
// its first value off the grid in double, else the row (off in float only).
[[noreturn]] void fail_weight_row_off_grid(const std::string& who, const float* row, int64_t k, int64_t o,
                                           double s);

// The GEMM kernels the ops above run: the best this CPU has (nullopt), or
// the one given (tests: every kernel gives the same results bit for bit;
// avx512_vnni runs the input gradient on the packed kernel, the others on
// the transposed weight). Not thread-safe: set it between steps.
void set_int8_training_kernel(std::optional<GemmKernel> kernel);

}  // namespace qat::quant
