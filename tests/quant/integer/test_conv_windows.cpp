// Integer convolutions whose GEMM reads each patch from the padded image in
// place (Note [convolution windows] in quant/integer/ops/conv.cpp) against a
// 128-bit reference: kernel taps of several shapes, stride, dilation,
// padding and none (the image read where it lies), each different along
// the height and the width, output rows that wrap inside a tile of 6, two
// images in one chunk, output channels that are not a multiple of 64 or
// 16, a layer with few rows and a long K (the GEMM then shares its own
// tiles among the threads), on one and three threads; and every other
// kernel here (their im2row copies) to the same bytes.
#include <random>

#include "quant/integer/integer_model.h"
#include "tests/quant/integer/conv_layers.h"
#include "tests/quant/integer/int_reference.h"
#include "quant/integer/ops/matmul.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

using testing::ConvCase;
using testing::conv_layer;

namespace {

// y[n, oh, ow, o] by its definition, in 128-bit integers.
uint8_t reference(const IntLayer& l, const uint8_t* x, int64_t h, int64_t w, int64_t n, int64_t oh, int64_t ow,
                  int64_t o) {
  const int64_t C = l.in_channels;
  __int128 acc = 0;
  for (int64_t i = 0; i < l.kernel_h; ++i)
    for (int64_t j = 0; j < l.kernel_w; ++j) {
      const int64_t ih = oh * l.conv.stride_h - l.conv.pad_h + i * l.conv.dil_h;
      const int64_t iw = ow * l.conv.stride_w - l.conv.pad_w + j * l.conv.dil_w;
      if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;  // (the zero point: adds 0)
      for (int64_t c = 0; c < C; ++c)
        acc += (int64_t{x[((n * h + ih) * w + iw) * C + c]} - l.in.zero_point) *
               l.weight.data<int8_t>()[((o * l.kernel_h + i) * l.kernel_w + j) * C + c];
    }
  return testing::requantized(l, o, acc, 0);  // (no fractional weight zero points)
}

// How many outputs of y differ from the reference.
int64_t mismatches(const IntLayer& l, const Tensor& x, const Tensor& y) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), OH = y.size(1), OW = y.size(2), O = l.out_channels;
  int64_t bad = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t o = 0; o < O; ++o)
          bad += y.data<uint8_t>()[((n * OH + oh) * OW + ow) * O + o] !=
                 reference(l, x.data<uint8_t>(), H, W, n, oh, ow, o);
  return bad;
}

}  // namespace

TEST_CASE("integer convolution read through windows equals its definition", "[quant][integer]") {
  const ConvCase cases[] = {
      {"3x3, 64 -> 64", 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 0, true},
      {"3x3 stride 2, 8 -> 80, zero point", 8, 80, 3, 3, 2, 2, 1, 1, 1, 1, 131, false},
      {"5x3, dilation 2, 20 -> 24", 20, 24, 5, 3, 1, 1, 2, 2, 2, 2, 17, true},
      {"7x7 stride 2, 4 -> 16", 4, 16, 7, 7, 2, 2, 3, 3, 1, 1, 255, false},
      {"1x1 stride 2, no padding, 12 -> 48", 12, 48, 1, 1, 2, 2, 0, 0, 1, 1, 9, true},
      {"3x3, no padding, 16 -> 32", 16, 32, 3, 3, 1, 1, 0, 0, 1, 1, 200, false},
      // height and width apart: a swapped stride, padding or dilation fails here
      {"3x3, stride 2 x 1, padding 0 x 1, dilation 1 x 2", 8, 16, 3, 3, 2, 1, 0, 1, 1, 2, 40, false},
      {"1x3, stride 1 x 2, padding 1 x 0 (not in place)", 4, 32, 1, 3, 1, 2, 1, 0, 1, 1, 66, true},
      // 18 rows, K = 1152: the GEMM splits its tiles among the threads itself
      {"3x3 over a 3x3 image, 128 -> 208", 128, 208, 3, 3, 1, 1, 1, 1, 1, 1, 5, true, 3, 3},
  };
  std::mt19937 rng(11);
  for (const ConvCase& k : cases) {
    SECTION(k.name) {
      const IntLayer l = conv_layer(k, rng);
      // 2 images of 9 x 7: output rows of 7 (3 or 4 at stride 2) wrap inside tiles of 6.
      const int64_t N = 2, H = k.h, W = k.w;
      Tensor x = Tensor::empty({N, H, W, k.c}, DType::u8);
      for (int64_t i = 0; i < x.numel(); ++i)
        x.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 3 == 0 ? (rng() % 2 ? 255 : 0) : rng() % 256);
      int windowed = 0, vnni = 0;
      for (const GemmKernel kernel : gemm_kernels_here())
        for (const int threads : {1, 3}) {
          testing::ThreadsGuard guard(threads);
          INFO("kernel " << enum_name(kernel) << ", " << threads << " threads");
          IntegerModel im;
          im.kernel = kernel;
          windowed += ops::runs_window(l, kernel, k.c);
          vnni += kernel == GemmKernel::avx512_vnni || kernel == GemmKernel::avx_vnni;
          REQUIRE(mismatches(l, x, im.run_layer(l, x)) == 0);
        }
      // The VNNI kernels read through windows.
      CHECK(windowed == vnni);
    }
  }
}
