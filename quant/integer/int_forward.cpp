#include "quant/integer/int_forward.h"

#include <cstring>

#include "quant/integer/ops/matmul.h"

namespace qat::quant {

namespace {

Tensor i32_on(const std::vector<int32_t>& v, Device device) {
  return Tensor::from_vector_i32(v, {static_cast<int64_t>(v.size())}).to(device);
}

Tensor f32_on(const std::vector<float>& v, Device device) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(device);
}

}  // namespace

LayerConstants layer_constants(const IntLayer& l, Device device) {
  QAT_CHECK(int_op_def(l.op).has(kMatmul), "layer_constants: layer '", l.name, "' (", int_op_name(l.op),
            ") multiplies no matrix");
  const int64_t C = l.out_channels, K = l.weight.numel() / C;
  const ops::OutputStage stage(l, K);  // the CPU's corrected bias, dequantization and fractional terms
  LayerConstants k;
  k.k = K;
  k.weight = l.weight.contiguous().view({C, K}).to(device);
  // Note [device output stage]: the bias takes the GEMM's 128 Σ_k w as well
  // (unsigned: wrapping sums, the same bits as the CPU's int32 ones).
  std::vector<int32_t> bias(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    bias[c] = static_cast<int32_t>(static_cast<uint32_t>(stage.bias[c]) + 128u * static_cast<uint32_t>(l.weight_row_sums[c]));
  k.bias = i32_on(bias, device);
  if (stage.weight_zero_points) k.weight_zero = l.weight_zero_point.contiguous().to(device);
  k.row_sums = stage.weight_zero_points || stage.weight_frac || l.dequantize;
  k.zx = l.in.zero_point + l.in.offset();
  if (l.dequantize) {
    k.dequant = f32_on(stage.dequant, device);
    k.frac_w = l.weight_zero_frac.contiguous().to(device);
    return k;
  }
  k.m0 = l.multiplier.contiguous().to(device);
  k.shift = l.shift.contiguous().to(device);
  k.residual = l.bias_residual.contiguous().to(device);
  if (stage.weight_frac) {
    std::vector<int32_t> words(static_cast<size_t>(2 * C));
    std::memcpy(words.data(), stage.frac_m0.data(), words.size() * sizeof(int32_t));
    k.frac_m0 = i32_on(words, device);
  }
  k.out_zero = stage.rq.out_zero;
  k.lo = stage.rq.lo;
  k.hi = stage.rq.hi;
  return k;
}

std::vector<LayerConstants> model_constants(const IntegerModel& m, Device device) {
  std::vector<LayerConstants> out;
  for (const IntLayer& l : m.layers)
    if (int_op_def(l.op).has(kMatmul)) out.push_back(layer_constants(l, device));
  return out;
}

}  // namespace qat::quant
