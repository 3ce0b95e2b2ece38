// One integer layer at a time: MobileNetV2's and ResNet-18's layers at
// 128 px, batch 32, each built as an IntLayer with random weights and run
// through IntegerModel::run_layer `reps` times; prints the fastest run of
// each (the machine's speed moves between runs: compare two builds by
// alternating them, layer by layer). Built on request:
//   cmake --build build --target qat_layer_bench
//   ./build/qat_layer_bench [REPS=20] [THREADS=2] [LAYER=all]
// The time includes the output tensor's allocation, as in the model.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "quant/integer/integer_model.h"

using namespace qat;
using namespace qat::quant;

namespace {

struct LayerShape {
  const char* what;
  int64_t in_c, out_c, kernel, stride, hw;
  bool dense = false;  // a full convolution even where out_c = in_c and kernel 3 (else depthwise there)
  bool depthwise() const { return !dense && kernel == 3 && in_c == out_c; }
};

// A conv layer with ReLU, per-channel multipliers near 0.56 2^-shift, zero
// points 0 (an 8-bit MobileNetV2 layer's typical numbers).
IntLayer make_layer(const LayerShape& s, std::mt19937& rng) {
  const bool depthwise = s.depthwise();
  IntLayer l;
  l.op = IntOp::conv;
  l.name = s.what;
  l.in.scale = 0.02f, l.in.zero_point = 0;
  l.out.scale = 0.05f, l.out.zero_point = 0;
  l.in_channels = s.in_c, l.out_channels = s.out_c;
  l.kernel_h = l.kernel_w = s.kernel;
  l.conv.stride_h = l.conv.stride_w = s.stride;
  l.conv.pad_h = l.conv.pad_w = s.kernel / 2;
  l.conv.dil_h = l.conv.dil_w = 1;
  l.conv.groups = depthwise ? s.in_c : 1;
  l.relu = true;
  l.weight = Tensor::empty({s.out_c, s.kernel, s.kernel, depthwise ? 1 : s.in_c}, DType::i8);
  int8_t* w = l.weight.data<int8_t>();
  for (int64_t i = 0, n = l.weight.numel(); i < n; ++i) w[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  l.weight_scale = Tensor::full({s.out_c}, 0.01f);
  l.weight_zero_point = Tensor::full({s.out_c}, 0.f).to(DType::i32);
  l.weight_zero_frac = Tensor::full({s.out_c}, 0.f);
  l.bias = Tensor::empty({s.out_c}, DType::i32);
  l.multiplier = Tensor::empty({s.out_c}, DType::i32);
  l.shift = Tensor::empty({s.out_c}, DType::i32);
  l.bias_residual = Tensor::full({s.out_c}, 0.f).to(DType::i32);
  for (int64_t c = 0; c < s.out_c; ++c) {
    l.bias.data<int32_t>()[c] = static_cast<int32_t>(rng() % 2001) - 1000;
    l.multiplier.data<int32_t>()[c] = 1200000000 + static_cast<int32_t>(c);
    l.shift.data<int32_t>()[c] = depthwise ? 6 : 8;
  }
  l.finalize();
  return l;
}

double fastest_ms(const IntLayer& l, const Tensor& x, int reps) {
  IntegerModel im;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor y = im.run_layer(l, x);
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  omp_set_num_threads(argc > 2 ? std::atoi(argv[2]) : 2);
  const int only = argc > 3 ? std::atoi(argv[3]) : -1;
  const LayerShape shapes[] = {
      {"depthwise 32 ch, 64x64, stride 1", 32, 32, 3, 1, 64},   {"depthwise 96 ch, 64x64, stride 2", 96, 96, 3, 2, 64},
      {"depthwise 144 ch, 32x32, stride 1", 144, 144, 3, 1, 32}, {"depthwise 144 ch, 32x32, stride 2", 144, 144, 3, 2, 32},
      {"depthwise 192 ch, 16x16, stride 1", 192, 192, 3, 1, 16}, {"depthwise 576 ch, 8x8, stride 1", 576, 576, 3, 1, 8},
      {"depthwise 960 ch, 4x4, stride 1", 960, 960, 3, 1, 4},    {"1x1 16 -> 96, 64x64", 16, 96, 1, 1, 64},
      {"1x1 24 -> 144, 32x32", 24, 144, 1, 1, 32},               {"1x1 32 -> 16, 64x64", 32, 16, 1, 1, 64},
      {"1x1 144 -> 24, 32x32", 144, 24, 1, 1, 32},               {"1x1 96 -> 24, 32x32", 96, 24, 1, 1, 32},
      {"stem 3 -> 32, 3x3 stride 2, 128x128", 3, 32, 3, 2, 128}, {"1x1 96 -> 576, 8x8", 96, 576, 1, 1, 8},
      // ResNet-18's at 128 px
      {"RN18 stem 3 -> 64, 7x7 stride 2", 3, 64, 7, 2, 128},     {"RN18 3x3 64 -> 64, 32x32", 64, 64, 3, 1, 32, true},
      {"RN18 3x3 128 -> 128, 16x16", 128, 128, 3, 1, 16, true},  {"RN18 3x3 256 -> 256, 8x8", 256, 256, 3, 1, 8, true},
      {"RN18 3x3 512 -> 512, 4x4", 512, 512, 3, 1, 4, true},
  };
  std::mt19937 rng(1);
  double total = 0;
  int index = -1;
  for (const LayerShape& s : shapes) {
    if (++index, only >= 0 && index != only) continue;
    const IntLayer l = make_layer(s, rng);
    Tensor x = Tensor::empty({32, s.hw, s.hw, s.in_c}, DType::u8);
    uint8_t* xd = x.data<uint8_t>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) xd[i] = static_cast<uint8_t>(rng());
    const double ms = fastest_ms(l, x, reps);
    total += ms;
    std::printf("%2d  %-36s %8.3f ms\n", index, s.what, ms);
  }
  std::printf("    %-36s %8.3f ms\n", "total", total);
}
