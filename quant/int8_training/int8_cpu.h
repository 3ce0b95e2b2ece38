#pragma once
// INT8 training's CPU implementation (int8_ops.h), its pieces by concern:
// the NCHW byte layouts (int8_layout.cpp), the forward (int8_cpu_forward.cpp),
// the gradient quantization and backward GEMMs (int8_cpu_backward.cpp), and
// what they share: the geometry, the kernel choice and the per-thread
// buffers. Internal to quant/int8_training.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"
#include "core/window.h"
#include "quant/int8_training/int8_ops.h"
#include "quant/integer/int8_gemm.h"

namespace qat::quant::int8_cpu {

struct Geom {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  Conv2dParams p;
  int64_t K() const { return c * kh * kw; }
  int64_t P() const { return oh * ow; }
  int64_t M() const { return n * P(); }
};

// A linear layer's geometry: the rows of im2row are the input itself (no
// padding: a padded 1x1 input's only tap may be the padding).
inline bool is_1x1(const Geom& g) {
  return g.P() == 1 && g.h == 1 && g.w == 1 && g.kh == 1 && g.kw == 1 && g.p.pad_h == 0 && g.p.pad_w == 0;
}

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

// Per-thread buffers reused across steps (AlexNet's classifier needs 150 MB
// of accumulators: a fresh zeroed vector every step page-faults and clears
// all of it). Contents are garbage on return.
enum Slot { kRows, kAcc, kCol, kWt, kSum, kPlanes, kSlots };
template <class T>
inline T* scratch(Slot slot, int64_t n) {
  thread_local std::vector<unsigned char> bufs[kSlots];
  std::vector<unsigned char>& b = bufs[slot];
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  if (b.size() < bytes) b.resize(bytes);
  return reinterpret_cast<T*>(b.data());
}

// ---------------------------------------------------------------- layouts (int8_layout.cpp)
// dst (cols, rows) = src (rows, cols)^T for bytes.
void transpose_bytes(const int8_t* src, int64_t rows, int64_t cols, int8_t* dst);
// rows (M x K): the im2row rows of u (N, C, H, W), `pad` outside.
void im2row(const uint8_t* u, const Geom& g, uint8_t pad, uint8_t* rows);
// col (K, M): the transpose of rows, stored as u - 128 (s8).
void im2col(const uint8_t* u, const Geom& g, uint8_t pad, int8_t* col);
// The input planes padded on every side (rows h + 2 pad_h, columns w + 2 pad_w).
int64_t padded_plane_h(const Geom& g);
int64_t padded_plane_w(const Geom& g);
// One image's col2im of its GEMM rows acc (P x K, stride ldc, less off[k]
// when given) into its padded planes in int64; then their inside times s.
void col2im_image(const int32_t* acc, int64_t ldc, const int64_t* off, const Geom& g, int64_t* planes);
void scale_to_float(const int64_t* planes, const Geom& g, double s, float* out);

// ---------------------------------------------------------------- forward (int8_cpu_forward.cpp)
// How the integer forward's errors name a layer (INT8 training's: int8_training_who).
std::string int_forward_who(const std::string& layer);
// x on `grid` as integers u (N, C, H, W); off the grid: an error naming `who`.
std::vector<uint8_t> input_integers(const Tensor& x, const ActGrid& grid, const std::string& who);
// wq / s_w[o] as int8 (O, K) and its row sums.
std::shared_ptr<QuantCodes> weight_integers(const Tensor& wq, const Tensor& w_scale, int64_t O, int64_t K,
                                            const std::string& who);
// The real zero as the padding integer.
uint8_t pad_integer(const ActGrid& grid, const Geom& g, const std::string& who);
// The forward of an integer layer on the CPU: the input's integers (u, kept
// where the backward wants them), the im2row rows where the packed weight
// gradient wants them, and Y.
struct IntForward {
  std::shared_ptr<std::vector<uint8_t>> u;
  Tensor rows;  // im2row rows, or undefined (a 1x1 layer's rows are u)
  uint8_t pad = 0;
  Tensor y;
};
IntForward integer_forward(const Tensor& x, const ActGrid& grid, const QuantCodes& wi, const Tensor& bias,
                           const Geom& g, const std::string& who);

// ---------------------------------------------------------------- backward (int8_cpu_backward.cpp)
// The whole backward of one layer (dx, dwq, dbias in the shapes of x and wq);
// rows: the forward's im2row rows where packed_weight_grad(g).
TensorList backward(const Tensor& gy, const std::vector<uint8_t>& u, const uint8_t* rows, const ActGrid& grid,
                    const QuantCodes& wi, const Geom& g, uint8_t pad, Int8GradState& st, const NeedGrad& need,
                    const Shape& x_shape, const Shape& w_shape);

}  // namespace qat::quant::int8_cpu
