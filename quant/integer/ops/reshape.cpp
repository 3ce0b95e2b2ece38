// Ops that move or clamp integers without arithmetic: flatten (NHWC -> (N,
// C*H*W) in PyTorch's (c, h, w) order) and ReLU (the zero point as the floor).
#include <algorithm>

#include "quant/integer/int_kernels.h"
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"

namespace qat::quant::ops {

namespace {

Tensor run_flatten(const IntLayer& l, const Tensor& x, GemmKernel) {
  check_u8(l, x, 4);
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  Tensor y = Tensor::empty({N, C * H * W}, DType::u8);
  const uint8_t* s = x.data<uint8_t>();
  uint8_t* d = y.data<uint8_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < H * W; ++p)
      for (int64_t c = 0; c < C; ++c) d[(n * C + c) * H * W + p] = s[(n * H * W + p) * C + c];
  return y;
}

Tensor run_relu(const IntLayer& l, const Tensor& x, GemmKernel) {
  QAT_CHECK(x.dtype() == DType::u8, "integer relu '", l.name, "': expects uint8");
  Tensor y = x.clone();
  const uint8_t z = static_cast<uint8_t>(l.in.zero_point + l.in.offset());
  uint8_t* d = y.data<uint8_t>();
  for (int64_t i = 0; i < y.numel(); ++i) d[i] = std::max(d[i], z);
  return y;
}

ActShape infer_flatten(const IntLayer& l, const ActShape& in) {
  need_image(l, in);
  const ActShape out = checked_shape(l, in);
  return {1, 1, out.h * out.w * out.c, true};
}

ActShape infer_relu(const IntLayer&, const ActShape& in) { return in; }

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kFlattenOp{IntOp::flatten, "flatten", 0, ops::run_flatten, nullptr, ops::infer_flatten};
extern constinit const IntOpDef kReluOp{IntOp::relu, "relu", 0, ops::run_relu, nullptr, ops::infer_relu};
}  // namespace qat::quant
