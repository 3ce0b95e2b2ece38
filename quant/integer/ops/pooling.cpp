// Pooling on the integers: max pooling and adaptive average pooling, u8 NHWC
// in and out on the input's grid.
#include <cmath>

#include "quant/integer/int_op.h"
#include "quant/integer/ops/matmul.h"

namespace qat::quant::ops {

namespace {

Tensor run_max_pool(const IntLayer& l, const Tensor& x, GemmKernel) {
  check_u8(l, x, 4);
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const auto& p = l.pool;
  const int64_t OH = conv_out_size(H, p.kernel_h, p.stride_h, p.pad_h, 1, "integer max_pool");
  const int64_t OW = conv_out_size(W, p.kernel_w, p.stride_w, p.pad_w, 1, "integer max_pool");
  Tensor y = Tensor::empty({N, OH, OW, C}, DType::u8);
  max_pool_u8(x.data<uint8_t>(), {N, H, W, C, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, OH, OW},
              y.data<uint8_t>());
  return y;
}

Tensor run_adaptive_avg_pool(const IntLayer& l, const Tensor& x, GemmKernel) {
  check_u8(l, x, 4);
  Tensor y = Tensor::empty({x.size(0), l.out_h, l.out_w, x.size(3)}, DType::u8);
  adaptive_avg_pool_u8(x.data<uint8_t>(), x.size(0), x.size(1), x.size(2), x.size(3), l.out_h, l.out_w, l.round_q16,
                       y.data<uint8_t>());
  return y;
}

void finalize_adaptive_avg_pool(IntLayer& l) {
  QAT_CHECK(l.out.scale == l.in.scale && l.out.zero_point == l.in.zero_point && l.out.zero_frac == 0.f, "layer '",
            l.name, "': average pooling keeps its input's grid (less the zero point's fraction)");
  l.round_q16 = static_cast<int32_t>(std::lround((0.5 - static_cast<double>(l.in.zero_frac)) * 65536.0));
}

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern const IntOpDef kMaxPoolOp{IntOp::max_pool, "max_pool", kPoolGeometry, ops::run_max_pool, nullptr};
extern const IntOpDef kAdaptiveAvgPoolOp{IntOp::adaptive_avg_pool, "adaptive_avg_pool",
                                         kOutputSize | kRoundsOntoInputGrid, ops::run_adaptive_avg_pool,
                                         ops::finalize_adaptive_avg_pool};
}  // namespace qat::quant
