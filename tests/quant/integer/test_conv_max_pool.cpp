// A dense convolution and the max pool after it run together image by image
// (Note [conv then max pool] in quant/integer/ops/fused.h): the same bytes
// as the two layers one after the other, over conv paths (im2row of 3
// channels, windows), pool shapes (ResNet's 3x3 stride 2 with padding,
// 2x2, stride 1), batches that do and do not share out evenly and one to
// three threads; and when the integer model's forward takes the pair.
#include <omp.h>

#include <random>

#include "quant/integer/int_forward.h"
#include "quant/integer/integer_model.h"
#include "quant/integer/ops/fused.h"
#include "tests/quant/integer/conv_layers.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;
using testing::ConvCase;
using testing::conv_layer;

namespace {

IntLayer max_pool_layer(const IntLayer& conv, int64_t k, int64_t stride, int64_t pad) {
  IntLayer l;
  l.op = IntOp::max_pool;
  l.name = conv.name + ".pool";
  l.in = l.out = conv.out;
  l.in_channels = l.out_channels = conv.out_channels;
  l.pool.kernel_h = l.pool.kernel_w = k;
  l.pool.stride_h = l.pool.stride_w = stride;
  l.pool.pad_h = l.pool.pad_w = pad;
  l.finalize();
  return l;
}

Tensor random_images(int64_t n, int64_t h, int64_t w, int64_t c, std::mt19937& rng) {
  Tensor x = Tensor::empty({n, h, w, c}, DType::u8);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  return x;
}

}  // namespace

TEST_CASE("a conv and its max pool run image by image give the two layers' bytes", "[quant][integer]") {
  struct PoolCase {
    int64_t k, stride, pad;
  };
  const ConvCase convs[] = {
      // name, c, out, kh, kw, stride h/w, pad h/w, dil h/w, zx, relu, h, w
      {"stem 7x7/2 over 3 channels (im2row)", 3, 64, 7, 7, 2, 2, 3, 3, 1, 1, 5, true, 21, 19},
      {"3x3 over 8 channels (windows)", 8, 24, 3, 3, 1, 1, 1, 1, 1, 1, 0, true, 11, 9},
  };
  const PoolCase pools[] = {{3, 2, 1}, {2, 2, 0}, {3, 1, 1}};
  IntegerModel im;
  std::mt19937 rng(21);
  for (const ConvCase& k : convs)
    for (const PoolCase& pc : pools) {
      const IntLayer conv = conv_layer(k, rng);
      const IntLayer pool = max_pool_layer(conv, pc.k, pc.stride, pc.pad);
      for (const int64_t n : {1, 2, 3, 5})
        for (const int threads : {1, 2, 3}) {
          CAPTURE(k.name, pc.k, pc.stride, pc.pad, n, threads);
          testing::ThreadsGuard guard(threads);
          const Tensor x = random_images(n, k.h, k.w, k.c, rng);
          const Tensor want = im.run_layer(pool, im.run_layer(conv, x));
          REQUIRE(testing::same_bits(ops::run_conv_max_pool(conv, pool, x, im.kernel), want));
        }
    }
}

TEST_CASE("the integer model runs a conv with its max pool where the pool alone reads it and images share out",
          "[quant][integer]") {
  std::mt19937 rng(5);
  const IntLayer conv = conv_layer({"c", 4, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, true}, rng);
  IntLayer pool = max_pool_layer(conv, 3, 2, 1);
  std::vector<IntLayer> layers = {conv, pool};
  const std::vector<size_t> last_read = last_readers(layers);
  testing::ThreadsGuard guard(2);
  CHECK(ops::fuses_conv_max_pool(layers, 0, last_read, 2));
  CHECK(ops::fuses_conv_max_pool(layers, 0, last_read, 32));
  CHECK(ops::fuses_conv_max_pool(layers, 0, last_read, 9));       // (4 or more a thread)
  CHECK_FALSE(ops::fuses_conv_max_pool(layers, 0, last_read, 3));  // 2 + 1: one thread would idle half the time
  CHECK_FALSE(ops::fuses_conv_max_pool(layers, 0, last_read, 1));
  CHECK_FALSE(ops::fuses_conv_max_pool(layers, 1, last_read, 32));  // a pool, not a conv
  {
    testing::ThreadsGuard one(1);
    CHECK_FALSE(ops::fuses_conv_max_pool(layers, 0, last_read, 32));
  }
  bool inside = true;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    inside = ops::fuses_conv_max_pool(layers, 0, last_read, 32);
  }
  CHECK_FALSE(inside);
  // Another reader of the conv (a second pool on it): the conv's output must exist.
  IntLayer other = pool;
  other.inputs = {0};
  layers.push_back(other);
  CHECK_FALSE(ops::fuses_conv_max_pool(layers, 0, last_readers(layers), 32));
  // The last layer dequantizes: no integer output to pool.
  IntLayer logits = conv;
  logits.dequantize = true;
  CHECK_FALSE(ops::fuses_conv_max_pool({logits, pool}, 0, last_read, 32));
}
