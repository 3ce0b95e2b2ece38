// The integer depthwise convolution (Note [integer depthwise convolution])
// against a 128-bit reference, on edge cases: extreme inputs and weights,
// zero points of both, saturating multipliers, ReLU, fractional weight zero
// points (LSQ+), stride, padding and dilation; rows wide enough for the
// vector kernels' channel blocks and tails. The CPU kernel and the
// executors' generic code (the CUDA twin's) both.
#include <random>

#include "quant/integer/int_forward.h"
#include "quant/integer/integer_model.h"
#include "tests/quant/integer/int_reference.h"
#include "tests/host_exec.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

struct DwCase {
  const char* name;
  int64_t c, kh, kw, stride, pad, dil;
  int32_t zx, zw;
  float frac_w;
  bool relu;
  int32_t m0, shift;
};

IntLayer depthwise_layer(const DwCase& k, std::mt19937& rng) {
  IntLayer l;
  l.op = IntOp::conv;
  l.name = std::string("features.") + k.name;
  l.in.scale = 0.02f, l.in.zero_point = k.zx;
  l.out.scale = 0.05f, l.out.zero_point = 7;
  l.in_channels = l.out_channels = k.c;
  l.kernel_h = k.kh, l.kernel_w = k.kw;
  l.conv.stride_h = l.conv.stride_w = k.stride;
  l.conv.pad_h = l.conv.pad_w = k.pad;
  l.conv.dil_h = l.conv.dil_w = k.dil;
  l.conv.groups = k.c;
  l.relu = k.relu;
  l.weight = Tensor::empty({k.c, k.kh, k.kw, 1}, DType::i8);
  for (int64_t i = 0; i < l.weight.numel(); ++i)  // the grid's ends often
    l.weight.data<int8_t>()[i] =
        static_cast<int8_t>(rng() % 4 == 0 ? (rng() % 2 ? 127 : -128) : int(rng() % 256) - 128);
  l.weight_scale = Tensor::full({k.c}, 0.01f);
  l.weight_zero_point = Tensor::empty({k.c}, DType::i32);
  l.weight_zero_frac = Tensor::full({k.c}, k.frac_w);
  l.bias = Tensor::empty({k.c}, DType::i32);
  l.multiplier = Tensor::empty({k.c}, DType::i32);
  l.shift = Tensor::empty({k.c}, DType::i32);
  l.bias_residual = Tensor::empty({k.c}, DType::i32);
  for (int64_t c = 0; c < k.c; ++c) {
    l.weight_zero_point.data<int32_t>()[c] = c % 2 ? k.zw : -k.zw;
    l.bias.data<int32_t>()[c] = static_cast<int32_t>(rng() % 200001) - 100000;
    l.multiplier.data<int32_t>()[c] = k.m0 + static_cast<int32_t>(c);
    l.shift.data<int32_t>()[c] = k.shift;
    l.bias_residual.data<int32_t>()[c] = static_cast<int32_t>(rng() % 1001) - 500;
  }
  l.finalize();
  return l;
}

// y[n, oh, ow, c] by its definition, in 128-bit integers.
uint8_t reference(const IntLayer& l, const uint8_t* x, int64_t h, int64_t w, int64_t n, int64_t oh, int64_t ow,
                  int64_t c) {
  const int64_t C = l.in_channels;
  __int128 acc = 0, centred = 0;
  for (int64_t i = 0; i < l.kernel_h; ++i)
    for (int64_t j = 0; j < l.kernel_w; ++j) {
      const int64_t ih = oh * l.conv.stride_h - l.conv.pad_h + i * l.conv.dil_h;
      const int64_t iw = ow * l.conv.stride_w - l.conv.pad_w + j * l.conv.dil_w;
      const int64_t xv = ih < 0 || ih >= h || iw < 0 || iw >= w ? l.in.zero_point : x[((n * h + ih) * w + iw) * C + c];
      const int64_t wv = l.weight.data<int8_t>()[(c * l.kernel_h + i) * l.kernel_w + j];
      acc += (xv - l.in.zero_point) * (wv - l.weight_zero_point.data<int32_t>()[c]);
      centred += xv - l.in.zero_point;
    }
  return testing::requantized(l, c, acc, centred);
}

}  // namespace

TEST_CASE("integer depthwise convolution equals its definition on edge cases", "[quant][integer]") {
  const DwCase cases[] = {
      {"plain", 16, 3, 3, 1, 1, 1, 0, 0, 0.f, false, 1 << 30, 8},
      {"zero points, ReLU", 24, 3, 3, 2, 1, 1, 200, 5, 0.f, true, 1 << 30, 6},
      {"saturating both ways", 19, 5, 5, 1, 2, 1, 128, 0, 0.f, false, 2147483000, -2},
      {"fractional weight zero points (LSQ+)", 12, 3, 3, 1, 1, 1, 31, 3, 0.375f, false, 1500000000, 7},
      {"dilation 2, stride 2, no padding", 8, 3, 3, 2, 0, 2, 1, 0, 0.f, true, 1200000000, 9},
      // 108 channels: the vector kernels' blocks of 4 vectors, single vectors and the channel tail
      {"wide rows", 108, 3, 3, 1, 1, 1, 200, 5, 0.f, true, 1 << 30, 6},
      {"wide rows, 5x5, saturating", 108, 5, 5, 2, 2, 1, 128, 0, 0.f, false, 2147483000, -2},
      {"wide rows, dilation 2", 40, 3, 3, 1, 2, 2, 17, 0, 0.f, false, 1200000000, 9},
  };
  std::mt19937 rng(5);
  for (const DwCase& k : cases) {
    SECTION(k.name) {
      const IntLayer l = depthwise_layer(k, rng);
      // Rows wide enough for the interior kernel's blocks of 8 outputs at
      // stride 2 (21), and narrow ones: a block of 4 and one overlapping it
      // (7 at stride 1: 5 interior outputs), single outputs (4).
      for (const int64_t W : {21, 7, 4}) {
        if ((k.kw - 1) * k.dil + 1 > W + 2 * k.pad) continue;  // (no output column)
        const int64_t N = 2, H = 11;
        INFO("width " << W);
        Tensor x = Tensor::empty({N, H, W, k.c}, DType::u8);
        for (int64_t i = 0; i < x.numel(); ++i)
          x.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 3 == 0 ? (rng() % 2 ? 255 : 0) : rng() % 256);
        IntegerModel im;
        const Tensor y = im.run_layer(l, x);
        const int64_t OH = y.size(1), OW = y.size(2);
        int64_t low = 0, high = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow)
              for (int64_t c = 0; c < k.c; ++c) {
                const uint8_t got = y.data<uint8_t>()[((n * OH + oh) * OW + ow) * k.c + c];
                INFO("n " << n << " oh " << oh << " ow " << ow << " c " << c);
                REQUIRE(got == reference(l, x.data<uint8_t>(), H, W, n, oh, ow, c));
                low += got == 0, high += got == 255;
              }
        if (std::string(k.name) == "saturating both ways" && W == 21) CHECK((low > 0 && high > 0));
        // The executors' generic code (the CUDA twin's), emulated on the host.
        testing::HostExec ex;
        const LayerConstants consts = layer_constants(l, Device::cpu);
        const ActShape out = int_op_def(l.op).infer(l, {H, W, k.c, false});
        REQUIRE(testing::same_bits(run_generic_layer(ex, l, &consts, x, out), y));
      }
    }
  }
}
