// Pooling on the integers: max pooling and adaptive average pooling, u8 NHWC
// in and out on the input's grid.
#include <cmath>

#include "quant/integer/int_kernels.h"
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"

namespace qat::quant::ops {

namespace {

Tensor run_max_pool(const IntLayer& l, const Tensor& x, GemmKernel) {
  check_u8(l, x, 4);
  const PoolShape s = max_pool_shape(l.pool, x.size(0), x.size(1), x.size(2), x.size(3));
  Tensor y = Tensor::empty({s.n, s.out_h, s.out_w, s.c}, DType::u8);
  max_pool_u8(x.data<uint8_t>(), s, y.data<uint8_t>());
  return y;
}

Tensor run_adaptive_avg_pool(const IntLayer& l, const Tensor& x, GemmKernel) {
  check_u8(l, x, 4);
  Tensor y = Tensor::empty({x.size(0), l.out_h, l.out_w, x.size(3)}, DType::u8);
  adaptive_avg_pool_u8(x.data<uint8_t>(), x.size(0), x.size(1), x.size(2), x.size(3), l.out_h, l.out_w,
                       y.data<uint8_t>());
  return y;
}

// The stored integers share one grid in and out (the zero point's fraction
// included), so the mean is rounded as it is: to nearest, ties upwards.
void finalize_adaptive_avg_pool(IntLayer& l) {
  QAT_CHECK(l.out == l.in, "layer '", l.name, "': average pooling keeps its input's grid");
}

// Padding at most half the kernel, as PyTorch's max pooling requires.
ActShape infer_max_pool(const IntLayer& l, const ActShape& in) {
  need_image(l, in);
  const auto& p = l.pool;
  QAT_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
            "integer max_pool '", l.name, "': padding ", p.pad_h, "x", p.pad_w, " must be at most half the kernel ",
            p.kernel_h, "x", p.kernel_w);
  const int64_t oh = conv_out_size(in.h, p.kernel_h, p.stride_h, p.pad_h, 1, "integer max_pool");
  const int64_t ow = conv_out_size(in.w, p.kernel_w, p.stride_w, p.pad_w, 1, "integer max_pool");
  return checked_shape(l, {oh, ow, in.c, false});
}

ActShape infer_adaptive_avg_pool(const IntLayer& l, const ActShape& in) {
  need_image(l, in);
  return checked_shape(l, {l.out_h, l.out_w, in.c, false});
}

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kMaxPoolOp{
    IntOp::max_pool, "max_pool", kPoolGeometry, ops::run_max_pool, nullptr, ops::infer_max_pool};
extern constinit const IntOpDef kAdaptiveAvgPoolOp{
    IntOp::adaptive_avg_pool, "adaptive_avg_pool", kOutputSize | kRoundsOntoInputGrid,
    ops::run_adaptive_avg_pool, ops::finalize_adaptive_avg_pool, ops::infer_adaptive_avg_pool};
}  // namespace qat::quant
