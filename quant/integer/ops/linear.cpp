// Integer linear layer: u8 (N, K) in, u8 (N, C) out (or float logits).
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"
#include "quant/integer/ops/matmul.h"

namespace qat::quant::ops {

namespace {

Tensor run_linear(const IntLayer& l, const Tensor& x, GemmKernel kernel) {
  check_u8(l, x, 2);
  const int64_t N = x.size(0), K = x.size(1), CO = l.out_channels;
  QAT_CHECK(K == l.in_channels, "integer linear '", l.name, "': input has ", K, " features, the layer expects ",
            l.in_channels);
  const OutputStage stage(l, K);
  std::vector<int32_t> acc(static_cast<size_t>(N * CO));
  gemm(l, kernel, N, x.data<uint8_t>(), acc.data());
  Tensor y = l.dequantize ? Tensor::empty({N, CO}, DType::f32) : Tensor::empty({N, CO}, DType::u8);
  if (l.dequantize)
    stage.finish(acc.data(), x.data<uint8_t>(), N, nullptr, y.data<float>(), CO, 1);
  else
    stage.finish(acc.data(), x.data<uint8_t>(), N, y.data<uint8_t>(), nullptr, 0, 0);
  return y;
}

ActShape infer_linear(const IntLayer& l, const ActShape& in) {
  need_flat(l, in);
  QAT_CHECK(in.c == l.in_channels, "integer linear '", l.name, "': input has ", in.c, " features, the layer expects ",
            l.in_channels);
  return checked_shape(l, {1, 1, l.out_channels, true});
}

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kLinearOp{
    IntOp::linear, "linear", kMatmul, ops::run_linear, ops::finalize_matmul, ops::infer_linear};
}  // namespace qat::quant
