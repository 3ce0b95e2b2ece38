#include "quant/integer/ops/matmul.h"

#include <cmath>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"
#include "quant/integer/int8_gemm_packed.h"

namespace qat::quant::ops {

namespace {
// product(C, ldc) writes M rows of the packed weights' B.N columns; the
// layer's out_channels of them land in acc (out_channels a row), through a
// per-thread buffer where the packing padded the columns to a multiple of 16
// (MobileNetV2's 96 -> 24 at 32 x 32 px, batch 32, Zen 5: 0.32 ms on the
// unpacked kernel, 0.17 so).
template <class Product>
void into_layer_columns(const IntLayer& l, int64_t M, int32_t* acc, Product&& product) {
  const int64_t N = l.packed_weight.N;
  if (N == l.out_channels) return product(acc, N);
  thread_local AlignedVector<int32_t> padded;
  if (padded.size() < static_cast<size_t>(M * N)) padded.resize(static_cast<size_t>(M * N));
  product(padded.data(), N);
  for (int64_t r = 0; r < M; ++r)
    std::memcpy(acc + r * l.out_channels, padded.data() + r * N, static_cast<size_t>(l.out_channels) * sizeof(int32_t));
}
}  // namespace

// On the packed weights where the layer has them and the kernel takes them.
void gemm(const IntLayer& l, GemmKernel model_kernel, int64_t M, const uint8_t* rows, int32_t* acc, int64_t lda,
          bool zero_tail) {
  const int64_t K = l.weight.numel() / l.out_channels;
  const GemmKernel kernel = layer_gemm_kernel(l, model_kernel);
  if (lda == 0) lda = K;
  if (!runs_packed(l, kernel))
    return gemm_u8s8s32_bounded(kernel, gemm_ranges(l), M, l.out_channels, K, rows, lda, l.weight.data<int8_t>(), K,
                                acc, l.out_channels);
  into_layer_columns(l, M, acc, [&](int32_t* c, int64_t ldc) {
    gemm_u8s8s32_packed_bounded(kernel, gemm_ranges(l), M, rows, lda, l.packed_weight, c, ldc, zero_tail);
  });
}

bool runs_window(const IntLayer& l, GemmKernel model_kernel, int64_t run) {
  const GemmKernel kernel = layer_gemm_kernel(l, model_kernel);
  return runs_packed(l, kernel) && can_use_packed_window(kernel, l.packed_weight.N, run);
}

void gemm_window(const IntLayer& l, GemmKernel model_kernel, int64_t M, const WindowRows& rows, int32_t* acc) {
  const GemmKernel kernel = layer_gemm_kernel(l, model_kernel);
  into_layer_columns(l, M, acc, [&](int32_t* c, int64_t ldc) {
    gemm_u8s8s32_packed_window(kernel, M, rows, l.packed_weight, c, ldc);
  });
}

namespace {

// What freeze guarantees, checked again for a layer read from a file: the
// weights and their zero points on the weight grid and |bias| < 2^30, so that
// with K <= kMaxProducts (integer_model.h) no int32 sum of the kernels can
// overflow.
void check_integer_ranges(const IntLayer& l) {
  QAT_CHECK(l.weight_bits >= 2 && l.weight_bits <= 8, "layer '", l.name, "': weight_bits ", l.weight_bits,
            " outside 2..8");
  const int32_t lo = l.weight_qmin(), hi = l.weight_qmax();
  const int8_t* w = l.weight.data<int8_t>();
  for (int64_t i = 0; i < l.weight.numel(); ++i)
    QAT_CHECK(w[i] >= lo && w[i] <= hi, "layer '", l.name, "': weight ", static_cast<int>(w[i]), " at ", i,
              " is off the ", l.weight_bits, "-bit ", l.weight_signed ? "signed" : "unsigned", " grid [", lo, ", ", hi,
              "]");
  for (int64_t c = 0; c < l.out_channels; ++c) {
    const int32_t z = l.weight_zero_point.data<int32_t>()[c], b = l.bias.data<int32_t>()[c];
    QAT_CHECK(z >= lo && z <= hi, "layer '", l.name, "': weight zero point ", z, " of channel ", c,
              " is off the grid [", lo, ", ", hi, "]");
    QAT_CHECK(b > -(1 << 30) && b < (1 << 30), "layer '", l.name, "': bias ", b, " of channel ", c,
              " is outside (-2^30, 2^30)");
  }
}

}  // namespace

void finalize_matmul(IntLayer& l) {
  const int64_t K = l.products_per_output();
  const Shape wshape = int_op_def(l.op).has(kConvGeometry)
                           ? Shape{l.out_channels, l.kernel_h, l.kernel_w, l.in_channels / l.conv.groups}
                           : Shape{l.out_channels, l.in_channels};
  auto check = [&](const Tensor& t, const char* field, DType dt, const Shape& shape) {
    QAT_CHECK(t.defined() && t.dtype() == dt && t.sizes() == shape, "layer '", l.name, "': ", field, " must be ",
              dtype_name(dt), " of shape ", shape_str(shape), ", got ",
              t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.sizes()) : std::string("nothing"));
  };
  check(l.weight, "weight", DType::i8, wshape);
  check(l.weight_scale, "weight_scale", DType::f32, {l.out_channels});
  check(l.weight_zero_point, "weight_zero_point", DType::i32, {l.out_channels});
  if (!l.weight_zero_frac.defined()) l.weight_zero_frac = Tensor::zeros({l.out_channels});
  check(l.weight_zero_frac, "weight_zero_frac", DType::f32, {l.out_channels});
  for (int64_t c = 0; c < l.out_channels; ++c)
    QAT_CHECK(std::abs(l.weight_zero_frac.data<float>()[c]) <= 0.5f, "layer '", l.name,
              "': weight_zero_frac of channel ", c, " is ", l.weight_zero_frac.data<float>()[c],
              ", outside [-1/2, 1/2]");
  check(l.bias, "bias", DType::i32, {l.out_channels});
  check_integer_ranges(l);
  if (!l.dequantize) {
    check(l.multiplier, "multiplier", DType::i32, {l.out_channels});
    check(l.shift, "shift", DType::i32, {l.out_channels});
    check(l.bias_residual, "bias_residual", DType::i32, {l.out_channels});
    for (int64_t c = 0; c < l.out_channels; ++c) {
      const int32_t m = l.multiplier.data<int32_t>()[c], s = l.shift.data<int32_t>()[c];
      const int32_t r = l.bias_residual.data<int32_t>()[c];
      QAT_CHECK((m == 0 || m >= (1 << 30)) && s >= -31 && s <= 31, "layer '", l.name, "': channel ", c,
                " has an invalid fixed-point multiplier (m0 ", m, ", shift ", s, "): m0 must be in [2^30, 2^31)");
      QAT_CHECK(std::abs(static_cast<int64_t>(r)) <= m / 2 + 1, "layer '", l.name, "': channel ", c, ": bias residual ",
                r, " exceeds half the multiplier ", m);
    }
  }
  QAT_CHECK(l.conv.groups == 1 || (l.conv.groups == l.in_channels && l.conv.groups == l.out_channels),
            "layer '", l.name, "': grouped convolution has an integer kernel only when depthwise (groups = in = out "
            "channels), got groups ", l.conv.groups, " for ", l.in_channels, " -> ", l.out_channels, " channels");
  QAT_CHECK(l.clamp_max == INT32_MAX || (l.relu && !l.dequantize && l.clamp_max >= l.out.zero_point &&
                                          l.clamp_max <= l.out.qmax()),
            "layer '", l.name, "': clamp_max ", l.clamp_max, " (a ReLU6's) needs relu, a requantized output and a value "
            "from the output zero point ", l.out.zero_point, " to qmax ", l.out.qmax());
  QAT_CHECK(!l.depthwise() || !l.dequantize, "layer '", l.name,
            "': a depthwise convolution cannot dequantize (it is never the network's last layer)");
  // Packed when any kernel here takes it (the layout is the same for all:
  // amx_emulated, avx2 and avx_vnni read the best kernel's packing); the
  // depthwise kernel reads the weights as they are.
  l.packed_weight = !l.depthwise() && any_packed_kernel_here(packed_columns(l.out_channels))
                        ? pack_b_vnni(l.weight.data<int8_t>(), l.out_channels, K, K)
                        : PackedB{};
  l.weight_row_sums.assign(static_cast<size_t>(l.out_channels), 0);
  const int8_t* w = l.weight.data<int8_t>();
  for (int64_t c = 0; c < l.out_channels; ++c)
    for (int64_t k = 0; k < K; ++k) l.weight_row_sums[c] += w[c * K + k];
}

}  // namespace qat::quant::ops
