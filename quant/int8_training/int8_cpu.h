#pragma once
// INT8 training's stages on the CPU (CpuStages; int8_layer.h runs the
// layer's steps on them), its pieces by concern: the forward
// (int8_cpu_forward.cpp; the NCHW byte layouts are the integer model's,
// quant/integer/byte_layout.h), the gradient
// quantization and backward GEMMs (int8_cpu_backward.cpp), and what they
// share: the geometry, the kernel choice and the per-thread buffers.
// Internal to quant/int8_training.
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"
#include "core/window.h"
#include "quant/int8_training/int8_math.h"
#include "quant/int8_training/int8_ops.h"
#include "quant/integer/byte_layout.h"
#include "quant/integer/int8_gemm.h"

namespace qat::quant::int8_cpu {

using Geom = int8_math::Geometry;

// A linear layer's geometry: the rows of im2row are the input itself (no
// padding: a padded 1x1 input's only tap may be the padding).
inline bool is_1x1(const Geom& g) {
  return g.P() == 1 && g.h == 1 && g.w == 1 && g.kh == 1 && g.kw == 1 && g.pad_h == 0 && g.pad_w == 0;
}
// A 1x1 kernel read at every input position (stride 1, no padding): its
// im2row rows are each image's planes transposed.
inline bool is_pointwise(const Geom& g) {
  return !g.depthwise() && g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 &&
         g.pad_w == 0 && g.oh == g.h && g.ow == g.w;
}
// Whether the forward builds a dense layer's rows from NHWC images, columns
// in (ki, kj, c) order (im2row_nchw_as_nhwc); a 1x1 layer's are u or its
// planes transposed, columns in c order either way.
inline bool rows_in_nhwc_order(const Geom& g) { return !g.depthwise() && !is_1x1(g) && !is_pointwise(g); }

// ---------------------------------------------------------------- kernels
// The kernel set_int8_training_kernel chose, else the best here.
std::optional<GemmKernel>& kernel_override();
GemmKernel int8_gemm_kernel();
// Whether kernel k multiplies packed operands (int8_gemm_packed.h).
bool packs(GemmKernel k);
// Whether the backward GEMMs run on packed operands.
bool packed_backward();
// Whether the weight gradient runs on the packed kernel: it reads the
// forward's im2row rows, which the layer then keeps for its backward.
bool packed_weight_grad(const Geom& g);

// Note [the weight gradient's rows packed in the forward]: the packed
// weight gradient multiplies G by the forward's im2row rows, packed for its
// kernel a block of M at a time (Note [the weight gradient in blocks of M]).
// Packed in the backward, the rows came back from memory (layer 1 of
// ResNet-18 at 128 px: 19 MB a layer, about 11 GB/s). Where this applies,
// the forward's chunks pack their rows while they are in cache instead,
// into the blocks' layout, and keep that: blocks of whole images (P <= kBlockM:
// floor(kBlockM / P) images) or of kBlockM rows (P a multiple of it), each
// [N/16][rows/4][16][4] (N: K padded to 64), one after the other; and the
// column sums of u - 128 of each segment (an image, or kBlockM rows of one),
// added up per block by the backward. The same bytes and sums as packing
// the block in the backward: the same integers, the same floats. The cost:
// rows of K padded to 64 bytes are kept (ResNet's stem: 192 for 147).
constexpr int64_t kBlockM = 4096;
struct PackedRows {
  Tensor bytes;               // the blocks (u8)
  std::vector<int32_t> sums;  // per segment, N each
  int64_t block = 0, segment = 0, n = 0;  // rows a block (the last may be shorter) and a segment; N
  bool defined() const { return bytes.defined(); }
};
// Whether the forward packs a layer's rows (AVX-512 VNNI kernel, chunked
// forward, P a multiple of 4 that fits the blocks).
bool packs_rows_in_forward(const Geom& g, GemmKernel kernel);

// Per-thread buffers reused across steps (AlexNet's classifier needs 150 MB
// of accumulators: a fresh zeroed vector every step page-faults and clears
// all of it). Contents are garbage on return.
enum Slot { kAcc, kCol, kWt, kSum, kSlots };
template <class T>
inline T* scratch(Slot slot, int64_t n) {
  thread_local std::vector<unsigned char> bufs[kSlots];
  std::vector<unsigned char>& b = bufs[slot];
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  if (b.size() < bytes) b.resize(bytes);
  return reinterpret_cast<T*>(b.data());
}

// ---------------------------------------------------------------- layouts
// The layer's window as the byte layouts take it (quant/integer/byte_layout.h:
// im2row_nchw_as_nhwc, im2col_nchw, col2im_nchw, with g.n images).
inline Im2RowShape window_of(const Geom& g) {
  return {g.h, g.w, g.c, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w, g.oh, g.ow};
}

// ---------------------------------------------------------------- the input's integers
// int8_math::input_integer's rule without a branch, for vectorised loops:
// u, and 1 where x is off the grid (u is then 0).
struct InputRule {
  double inv, zero, top;
  explicit InputRule(const ActGrid& grid)
      : inv(1.0 / static_cast<double>(grid.scale)), zero(grid.zero), top(static_cast<double>(grid.levels)) {}
  // r: x's nearest grid integer; whether x is on the grid (no short
  // circuit: no branch).
  bool nearest(float x, double& r) const {
    const double t = std::fma(static_cast<double>(x), inv, zero);
    r = std::nearbyint(t);
    return (std::fabs(t - r) <= 1e-3) & (r >= 0.0) & (r < top);
  }
  int32_t operator()(float x, uint8_t& u) const {
    double r;
    const bool ok = nearest(x, r);
    u = static_cast<uint8_t>(static_cast<int32_t>(ok ? r : 0.0));
    return ok ? 0 : 1;
  }
  // The same, v = u - zero as a float (exact: integers below 2^8), with no
  // byte in between (which kept GCC from vectorising the loop).
  int32_t centred(float x, float& v) const {
    double r;
    const bool ok = nearest(x, r);
    const double below = r > top ? top : r;  // (bounded off the grid too: no float overflow)
    v = static_cast<float>((below < 0.0 ? 0.0 : below) - zero);
    return ok ? 0 : 1;
  }
};
// u[i] = x[i]'s integer for i < n; 1 where any is off the grid. Out of
// line, so that each caller gets the vectorised loop (inlined into a lambda
// in an OpenMP region, GCC kept the scalar one).
int32_t grid_codes(const float* x, int64_t n, const InputRule& rule, uint8_t* u);
// v[i] = x[i]'s integer minus the zero point, as a float.
int32_t centred_grid_codes(const float* x, int64_t n, const InputRule& rule, float* v);
// The error for the first of x's n values off the grid (one is known to be).
[[noreturn]] void fail_first_off_grid(const float* x, int64_t n, const ActGrid& grid, const std::string& who);

// ---------------------------------------------------------------- stages (int8_layer.h)
// How the integer forward's errors name a layer (INT8 training's: int8_training_who).
std::string int_forward_who(const std::string& layer);
// wq / s_w[o] as int8 (O, K) and its row sums (off the grid: an error naming who).
std::shared_ptr<QuantCodes> weight_integers(const Tensor& wq, const Tensor& w_scale, int64_t O, int64_t K,
                                            const std::string& who);

// Depthwise layers' three products as direct loops (int8_cpu_depthwise.cpp,
// Note [INT8 training of depthwise layers]): u the input's integers (NCHW),
// G (O, M) and Gx (M, O) the gradients' as the dense layers lay them out.
Tensor depthwise_forward(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const QuantCodes& wi,
                         const Tensor& bias, const Geom& g);
// Where the input's zero point lets the forward sum in float (Note [exact
// float depthwise sums]).
bool depthwise_sums_in_float(const ActGrid& grid, const Geom& g);
// The same forward read from x (N, C, H, W) itself, where
// depthwise_sums_in_float: each plane's integers made as it is loaded (off
// the grid: an error naming who).
Tensor depthwise_forward_of(const Tensor& x, const ActGrid& grid, const QuantCodes& wi, const Tensor& bias,
                            const Geom& g, const std::string& who);
Tensor depthwise_weight_grad(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const int8_t* G,
                             const int64_t* gsum, float scale_g, const Geom& g);
Tensor depthwise_input_grad(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g);

// INT8 training's stages on the CPU (Note [INT8 training over executors]):
// the tuned GEMM kernels (int8_gemm.h: AMX / VNNI / AVX-VNNI / AVX2, packed
// where it pays) and the vectorised gradient quantization (grad_rows.h), on
// the OpenMP threads. The forward in int8_cpu_forward.cpp, the rest in
// int8_cpu_backward.cpp.
struct CpuStages {
  static constexpr Device device = Device::cpu;
  struct Saved {
    Geom g;
    ActGrid grid;
    uint8_t pad = 0;
    std::shared_ptr<const QuantCodes> wi;  // the weight's integers (O, K)
    bool apply_ste = false;  // wi came from forward_codes: the clipped STE is applied to dW here
    bool keep_rows = false;  // keep the im2row rows for the packed weight gradient
    std::shared_ptr<std::vector<uint8_t>> u;  // the input's integers (N, C, H, W)
    Tensor rows;  // the im2row rows (M x K) where kept (a 1x1 layer's rows are u)
    PackedRows packed;  // or those rows packed (Note [the weight gradient's rows packed in the forward])
    // The integer forward of a QAT layer: no backward reads u, so a 1x1 or
    // depthwise layer's forward makes its integers from x as it reads it
    // (x and who kept for it, u left empty).
    bool forward_only = false;
    Tensor x;
    std::string who;
  };
  struct Codes {
    std::vector<int8_t> q;      // G (O, M) or Gx (M, O)
    std::vector<int64_t> gsum;  // G's row sums
    GradQuantStats stats;
  };
  void input_integers(Saved& sv, const Tensor& x, const std::string& who) const;
  Tensor forward_gemm(Saved& sv, const Tensor& bias) const;
  float max_abs(const Saved& sv, const Tensor& dy, int which, bool nan_wins) const;
  void refresh_clip(const Saved& sv, const Tensor& dy, int which, Int8GradState& st) const;
  Codes quantize(const Saved& sv, const Tensor& dy, int which, const int8_math::GradQuantizer& q) const;
  Tensor weight_grad(const Saved& sv, const Codes& c, float scale) const;
  Tensor input_grad(const Saved& sv, const Codes& c, float scale) const;
  Tensor bias_grad(const Saved& sv, const Tensor& dy) const;
  std::vector<int8_t> host_codes(const Codes& c) const { return c.q; }
};

}  // namespace qat::quant::int8_cpu
