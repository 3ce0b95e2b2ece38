#pragma once
// Shared by the integer conv tests: a dense convolution layer of a given
// geometry with random weights (often at the grid's ends), biases and
// per-channel multipliers, symmetric weights (no input row sums needed).
#include <random>
#include <string>

#include "quant/integer/integer_model.h"

namespace qat::testing {

struct ConvCase {
  const char* name;
  int64_t c, out, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int32_t zx;
  bool relu;
  int64_t h = 9, w = 7;  // the input images
};

inline quant::IntLayer conv_layer(const ConvCase& k, std::mt19937& rng) {
  quant::IntLayer l;
  l.op = quant::IntOp::conv;
  l.name = std::string("layer.") + k.name;
  l.in.scale = 0.02f, l.in.zero_point = k.zx;
  l.out.scale = 0.05f, l.out.zero_point = 3;
  l.in_channels = k.c, l.out_channels = k.out;
  l.kernel_h = k.kh, l.kernel_w = k.kw;
  l.conv.stride_h = k.stride_h, l.conv.stride_w = k.stride_w;
  l.conv.pad_h = k.pad_h, l.conv.pad_w = k.pad_w;
  l.conv.dil_h = k.dil_h, l.conv.dil_w = k.dil_w;
  l.relu = k.relu;
  l.weight = Tensor::empty({k.out, k.kh, k.kw, k.c}, DType::i8);
  for (int64_t i = 0; i < l.weight.numel(); ++i)  // the grid's ends often
    l.weight.data<int8_t>()[i] =
        static_cast<int8_t>(rng() % 4 == 0 ? (rng() % 2 ? 127 : -127) : int(rng() % 255) - 127);
  l.weight_scale = Tensor::full({k.out}, 0.01f);
  l.weight_zero_point = Tensor::full({k.out}, 0.f).to(DType::i32);  // (windows need no input row sums)
  l.weight_zero_frac = Tensor::full({k.out}, 0.f);
  l.bias = Tensor::empty({k.out}, DType::i32);
  l.multiplier = Tensor::empty({k.out}, DType::i32);
  l.shift = Tensor::empty({k.out}, DType::i32);
  l.bias_residual = Tensor::empty({k.out}, DType::i32);
  for (int64_t c = 0; c < k.out; ++c) {
    l.bias.data<int32_t>()[c] = static_cast<int32_t>(rng() % 200001) - 100000;
    l.multiplier.data<int32_t>()[c] = 1200000000 + static_cast<int32_t>(c * 7919);
    l.shift.data<int32_t>()[c] = 13;
    l.bias_residual.data<int32_t>()[c] = static_cast<int32_t>(rng() % 1001) - 500;
  }
  l.finalize();
  return l;
}

}  // namespace qat::testing
