// The integer model's device forward (int_forward.h): its code run on the
// host by an executor that emulates the GPU's launches (every index of a
// per-index kernel; the tiled GEMM's blocks phase by phase, thread after
// thread), against the CPU integer model bit for bit; then on the GPU where
// there is one.
#include <array>
#include <limits>
#include <random>

#include "core/autograd.h"
#include "models/models.h"
#include "quant/convert/freeze.h"
#include "quant/integer/cpu_exec.h"
#include "quant/integer/int_forward.h"
#include "quant/integer/int_kernels.h"
#include "quant/integer/integer_model_cuda.h"
#include "quant/sim/prepare.h"
#include "tests/cuda_test_util.h"
#include "tests/host_exec.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

using testing::HostExec;

// A prepared model after a few training batches, in eval mode (as test_freeze.cpp).
IntegerModel frozen(const std::string& arch, const std::string& backend, const QConfig& q, int64_t res) {
  ModulePtr m = make_model(arch, 10, 3);
  prepare(*m, testing::test_backend(backend), q);
  m->train();
  Generator g(7);
  NoGradGuard ng;
  for (int i = 0; i < 4; ++i) m->forward(Tensor::randn({8, 3, res, res}, g));
  m->eval();
  return freeze(*m);
}

// Every layer on the emulated device path from the CPU's input to that
// layer, against the CPU's output; then the whole model.
void require_layers_equal(const IntegerModel& im, const Tensor& x) {
  HostExec ex;
  const std::vector<LayerConstants> consts = model_constants(im, Device::cpu);
  ActShape shape{x.size(2), x.size(3), x.size(1), false};
  Tensor h = x;
  size_t next = 0;
  for (const IntLayer& l : im.layers) {
    const IntOpDef& def = int_op_def(l.op);
    shape = def.infer(l, shape);
    const Tensor cpu = im.run_layer(l, h);
    const LayerConstants* k = def.has(kMatmul) ? &consts[next++] : nullptr;
    const Tensor dev = run_int_layer(ex, l, k, h, shape);
    INFO("layer " << l.name << " (" << int_op_name(l.op) << ")");
    REQUIRE(testing::same_bits(dev, cpu));
    // The CPU executor's generic code (its threads, its GEMM), which an op
    // without a CPU kernel runs, against the CPU kernel.
    CpuExec cpu_ex;
    REQUIRE(testing::same_bits(run_generic_layer(cpu_ex, l, k, h, shape), cpu));
    h = cpu;
  }
  REQUIRE(testing::same_bits(run_int_model(ex, im, consts, x), im.forward(x)));
}

}  // namespace

namespace {
// An output stage that keeps the dot products and counts the writes.
struct RecordDots {
  using Acc = int32_t;
  int32_t* dots;
  int32_t* writes;
  int64_t n;
  void operator()(int64_t r, int64_t c, int32_t dot) const {
    dots[r * n + c] = dot;
    ++writes[r * n + c];
  }
};
}  // namespace

TEST_CASE("the device integer GEMM's tiles, emulated, equal the plain sum on edge shapes", "[quant][integer][math]") {
  std::mt19937 rng(5);
  // (m, n, k): one element; tile-exact; every remainder of the 64 x 64 x 32
  // tiles and of the 4-byte words; one output column; K at kMaxProducts.
  const std::vector<std::array<int64_t, 3>> shapes{{1, 1, 1},   {64, 64, 32}, {65, 63, 33}, {130, 1, 100},
                                                   {3, 129, 7}, {1, 70, 363}, {2, 5, 16384}};
  for (const auto& [m, n, k] : shapes) {
    for (int extremes = 0; extremes < 2; ++extremes) {
      CAPTURE(m, n, k, extremes);
      std::vector<uint8_t> x(static_cast<size_t>(m * k));
      std::vector<int8_t> w(static_cast<size_t>(n * k));
      for (auto& v : x) v = extremes ? 255 : static_cast<uint8_t>(rng() % 256);
      for (auto& v : w) v = extremes ? -128 : static_cast<int8_t>(rng() % 256);
      if (extremes) x[0] = 0, w[0] = 127;
      std::vector<int32_t> dots(static_cast<size_t>(m * n), -1), writes(static_cast<size_t>(m * n), 0);
      HostExec ex;
      ex.gemm(int_math::ShiftedRows<int_math::DenseRows>{{x.data(), k}}, int_math::S8Rows{w.data(), k}, m, n, k,
              RecordDots{dots.data(), writes.data(), n});
      bool all_equal = true, once = true;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
          int64_t ref = 0;
          for (int64_t i = 0; i < k; ++i) ref += (x[r * k + i] - 128) * w[c * k + i];
          all_equal = all_equal && dots[r * n + c] == ref;
          once = once && writes[r * n + c] == 1;
        }
      REQUIRE(all_equal);
      REQUIRE(once);
    }
  }
}

TEST_CASE("the device conv reads its patches as im2row_u8 writes them", "[quant][integer][math]") {
  std::mt19937 rng(9);
  struct Geometry {
    int64_t h, w, c, kh, kw, sh, sw, ph, pw, dh, dw;
  };
  // plain 3x3; AlexNet's conv1; dilation with padding; 1x1; a kernel wider than tall, stride beyond it
  for (const Geometry& s : std::vector<Geometry>{{7, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1},
                                                 {23, 23, 3, 11, 11, 4, 4, 2, 2, 1, 1},
                                                 {9, 8, 2, 3, 2, 1, 2, 2, 1, 2, 3},
                                                 {4, 5, 6, 1, 1, 1, 1, 0, 0, 1, 1},
                                                 {6, 9, 1, 2, 4, 3, 5, 1, 2, 1, 1}}) {
    CAPTURE(s.h, s.w, s.c, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw);
    const int64_t oh = conv_out_size(s.h, s.kh, s.sh, s.ph, s.dh, "test");
    const int64_t ow = conv_out_size(s.w, s.kw, s.sw, s.pw, s.dw, "test");
    const int64_t n = 2, K = s.kh * s.kw * s.c, P = oh * ow;
    std::vector<uint8_t> x(static_cast<size_t>(n * s.h * s.w * s.c));
    for (auto& v : x) v = static_cast<uint8_t>(rng() % 256);
    const uint8_t pad = 37;
    const Im2RowShape shape{s.h, s.w, s.c, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw, oh, ow};
    const int_math::ConvPatches patches{x.data(), s.h,  s.w,  s.c,  s.kh, s.kw, s.sh, s.sw,
                                        s.ph,     s.pw, s.dh, s.dw, oh,   ow,   pad};
    std::vector<uint8_t> rows(static_cast<size_t>(P * K));
    bool equal = true;
    for (int64_t img = 0; img < n; ++img) {
      im2row_u8(x.data() + img * s.h * s.w * s.c, shape, pad, rows.data());
      for (int64_t p = 0; p < P; ++p)
        for (int64_t k = 0; k < K; ++k) equal = equal && patches.at(img * P + p, k) == rows[p * K + k];
    }
    REQUIRE(equal);
  }
}

TEST_CASE("the device pools equal the CPU's on padded and uneven windows", "[quant][integer][math]") {
  std::mt19937 rng(4);
  const int64_t n = 2, h = 7, w = 6;
  // (the AVX-512 max pool: 64 channels a step, the last step masked)
  for (const int64_t c : {3, 64, 100}) {
    std::vector<uint8_t> x(static_cast<size_t>(n * h * w * c));
    for (auto& v : x) v = static_cast<uint8_t>(rng() % 256);
    // max pooling: 3x3 stride 2 padding 1 (padding never wins), 2x3 stride 1x3
    for (const auto& [kh, kw, sh, sw, ph, pw] :
         std::vector<std::array<int64_t, 6>>{{3, 3, 2, 2, 1, 1}, {2, 3, 1, 3, 1, 0}, {3, 3, 2, 2, 0, 0}}) {
      CAPTURE(c, kh, kw, sh, sw, ph, pw);
      const int64_t oh = conv_out_size(h, kh, sh, ph, 1, "test"), ow = conv_out_size(w, kw, sw, pw, 1, "test");
      std::vector<uint8_t> cpu(static_cast<size_t>(n * oh * ow * c));
      max_pool_u8(x.data(), {n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow}, cpu.data());
      const int_math::U8PoolGeometry g{h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
      bool equal = true;
      for (int64_t i = 0; i < static_cast<int64_t>(cpu.size()); ++i)
        equal = equal && int_math::max_pool_u8_at(i, x.data(), g) == cpu[i];
      REQUIRE(equal);
    }
    // adaptive average pooling: fewer outputs than inputs (uneven bins), more, as many
    for (const auto& [oh, ow] : std::vector<std::array<int64_t, 2>>{{3, 4}, {9, 13}, {7, 6}}) {
      CAPTURE(oh, ow);
      std::vector<uint8_t> cpu(static_cast<size_t>(n * oh * ow * c));
      adaptive_avg_pool_u8(x.data(), n, h, w, c, oh, ow, cpu.data());
      const int_math::U8PoolGeometry g{h, w, c, 1, 1, 1, 1, 0, 0, oh, ow};
      bool equal = true;
      for (int64_t i = 0; i < static_cast<int64_t>(cpu.size()); ++i)
        equal = equal && int_math::adaptive_avg_pool_u8_at(i, x.data(), g) == cpu[i];
      REQUIRE(equal);
    }
  }
}

TEST_CASE("the device input quantization equals the CPU's on NaN, infinities, ties and both grids",
          "[quant][integer][math]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values{nan, inf, -inf, 0.f, -0.f, 0.5f, 1.5f, -2.5f, 1e30f, -1e30f, 0.26f, 3.7f};
  const int64_t n = 2, c = 3, h = 2, w = 2;  // values cycled over 24 inputs
  Tensor x = Tensor::empty({n, c, h, w});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = values[i % values.size()];
  struct Grid {
    float scale, frac;
    int32_t zero, qmin, qmax, offset;
  };
  // uint8 affine; int8 symmetric stored +128; 4-bit with an LSQ+ fraction
  for (const Grid& q :
       std::vector<Grid>{{0.5f, 0.f, 3, 0, 255, 0}, {0.25f, 0.f, 0, -128, 127, 128}, {0.3f, 0.37f, 2, 0, 15, 0}}) {
    CAPTURE(q.scale, q.frac, q.zero);
    std::vector<uint8_t> cpu(static_cast<size_t>(x.numel()));
    quantize_input(x.data<float>(), n, c, h, w, q.scale, q.zero, q.frac, q.qmin, q.qmax, q.offset, cpu.data());
    const int_math::QuantizeInputGeometry g{c,
                                            h,
                                            w,
                                            1.0f / q.scale,
                                            q.frac,
                                            static_cast<float>(q.zero),
                                            static_cast<float>(q.qmin),
                                            static_cast<float>(q.qmax),
                                            q.offset};
    bool equal = true;
    for (int64_t i = 0; i < x.numel(); ++i)
      equal = equal && int_math::quantize_input_at(i, x.data<float>(), g) == cpu[i];
    REQUIRE(equal);
  }
}

TEST_CASE("the device integer forward, emulated on the host, equals the CPU integer model bit for bit",
          "[quant][integer][math]") {
  Generator g(11);
  const Tensor x = Tensor::randn({3, 3, 16, 16}, g);
  SECTION("default: uint8 affine activations, int8 per-channel weights") {
    require_layers_equal(frozen("small_cnn", "default", QConfig{}, 16), x);
  }
  SECTION("tensorrt: int8 symmetric activations (stored +128)") {
    require_layers_equal(frozen("small_cnn", "tensorrt", QConfig{}, 16), x);
  }
  SECTION("power_of_two multipliers") { require_layers_equal(frozen("small_cnn", "power_of_two", QConfig{}, 16), x); }
  SECTION("affine per-tensor weights: weight zero points, the row sums") {
    QConfig q;
    q.weight_symmetric = false;
    q.weight_per_channel = false;
    require_layers_equal(frozen("small_cnn", "default", q, 16), x);
  }
  SECTION("4-bit LSQ+: fractional zero points of activations and weights") {
    QConfig q;
    q.method = QuantMethod::lsq_plus;
    q.weight_symmetric = false;
    q.weight_bits = q.activation_bits = 4;
    require_layers_equal(frozen("small_cnn", "default", q, 16), x);
  }
  SECTION("depthwise convolutions (Note [integer depthwise convolution]), with and without weight zero points") {
    for (const bool affine : {false, true}) {
      QConfig q;
      q.weight_symmetric = q.weight_per_channel = !affine;
      ModulePtr m = testing::depthwise_chain(3);
      prepare(*m, testing::test_backend("default"), q);
      m->train();
      Generator gt(7);
      NoGradGuard ng;
      for (int i = 0; i < 4; ++i) m->forward(Tensor::randn({8, 3, 16, 16}, gt));
      m->eval();
      require_layers_equal(freeze(*m), x);
    }
  }
  SECTION("a conv that dequantizes (logits per position, NCHW), as the last layer") {
    for (const bool affine : {false, true}) {
      QConfig q;
      q.weight_symmetric = q.weight_per_channel = !affine;
      const IntegerModel im = frozen("small_cnn", "default", q, 16);
      IntegerModel cut;
      cut.layers.push_back(im.layers[0]);  // quantize_input
      IntLayer conv = im.layers[1];
      REQUIRE(conv.op == IntOp::conv);
      conv.dequantize = true;
      conv.finalize();
      cut.layers.push_back(conv);
      require_layers_equal(cut, x);
    }
  }
  SECTION("a ReLU of its own, on images and on features") {
    const IntegerModel im = frozen("small_cnn", "tensorrt", QConfig{}, 16);
    IntLayer relu;
    relu.op = IntOp::relu;
    relu.name = "relu";
    relu.in = relu.out = im.layers[1].out;  // a signed grid: stored zero point 128 + z
    std::mt19937 rng(3);
    for (const Shape& shape : {Shape{2, 5, 4, 3}, Shape{3, 7}}) {
      Tensor u = Tensor::empty(shape, DType::u8);
      for (int64_t i = 0; i < u.numel(); ++i) u.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
      const ActShape as =
          shape.size() == 4 ? ActShape{shape[1], shape[2], shape[3], false} : ActShape{1, 1, shape[1], true};
      HostExec ex;
      const Tensor cpu = IntegerModel{}.run_layer(relu, u);
      REQUIRE(testing::same_bits(run_int_layer(ex, relu, nullptr, u, as), cpu));
      // (one generic code on both executors: its values checked on their own)
      const int z = relu.in.zero_point + relu.in.offset();
      for (int64_t i = 0; i < u.numel(); ++i)
        REQUIRE(int{cpu.data<uint8_t>()[i]} == std::max(int{u.data<uint8_t>()[i]}, z));
    }
  }
  SECTION("AlexNet-BN at 64 px: conv1's 11 x 11 stride 4 patches, the classifier") {
    Generator g2(2);
    require_layers_equal(frozen("alexnet_bn", "default", QConfig{}, 64), Tensor::randn({2, 3, 64, 64}, g2));
  }
}

TEST_CASE("the integer model on the GPU gives the CPU's logits bit for bit", "[quant][integer][cuda]") {
  const IntegerModel alexnet = frozen("alexnet_bn", "default", QConfig{}, 64);
  if (!testing::cuda_device_or_skip()) {
    REQUIRE_THROWS_WITH(CudaIntegerModel(alexnet), Contains("integer inference on cuda"));
    return;
  }
  Generator g(3);
  for (const int64_t batch : {1, 5}) {
    const Tensor x = Tensor::randn({batch, 3, 64, 64}, g);
    const CudaIntegerModel gpu(alexnet);
    const Tensor logits = gpu.forward(x);
    REQUIRE(logits.device() == Device::cuda);
    REQUIRE(testing::same_bits(logits.to(Device::cpu), alexnet.forward(x)));
  }
  // The small models of the emulated test: every output stage the GEMM's epilogue has.
  QConfig affine;
  affine.weight_symmetric = affine.weight_per_channel = false;
  QConfig lsq_plus;
  lsq_plus.method = QuantMethod::lsq_plus;
  lsq_plus.weight_symmetric = false;
  lsq_plus.weight_bits = lsq_plus.activation_bits = 4;
  const std::vector<std::pair<std::string, QConfig>> configs{{"default", QConfig{}},
                                                             {"tensorrt", QConfig{}},
                                                             {"power_of_two", QConfig{}},
                                                             {"default", affine},
                                                             {"default", lsq_plus}};
  for (const auto& [backend, q] : configs) {
    CAPTURE(backend, static_cast<int>(q.method), q.weight_symmetric);
    const IntegerModel im = frozen("small_cnn", backend, q, 16);
    const Tensor x = Tensor::randn({4, 3, 16, 16}, g);
    REQUIRE(testing::same_bits(CudaIntegerModel(im).forward(x).to(Device::cpu), im.forward(x)));
  }
}

// 7-bit activations with 8-bit weights (PyTorch's reduce_range on x86), and
// 4-bit both sides: the pair sums fit int16, so the avx2 kernel multiplies
// with vpmaddubsw; the logits equal the reference kernel's on every kernel.
TEST_CASE("a frozen model whose pair sums fit int16 gives the reference logits on every GEMM kernel",
          "[quant][integer]") {
  Generator g(12);
  const Tensor x = Tensor::randn({3, 3, 16, 16}, g);
  for (const int act_bits : {7, 4}) {
    QConfig q;
    q.activation_bits = act_bits;
    q.weight_bits = act_bits == 4 ? 4 : 8;
    IntegerModel im = frozen("small_cnn", "default", q, 16);
    im.kernel = GemmKernel::reference;
    const Tensor want = im.forward(x);
    for (const GemmKernel k : testing::gemm_kernels_here()) {
      INFO(act_bits << "-bit activations, kernel " << gemm_kernel_name(k));
      im.kernel = k;
      REQUIRE(testing::same_bits(im.forward(x), want));
      for (const IntLayer& l : im.layers)
        if (int_op_def(l.op).has(kMatmul))
          CHECK((im.layer_kernel(l).find("vpmaddubsw") != std::string::npos) == (k == GemmKernel::avx2));
    }
  }
}

TEST_CASE("the integer model refuses a layer that reads another grid than the layer before writes",
          "[quant][integer]") {
  IntegerModel im = frozen("small_cnn", "default", QConfig{}, 16);
  size_t i = 1;
  while (!int_op_def(im.layers[i].op).has(kMatmul)) ++i;
  im.layers[i].in.bits = 7;
  Generator g(13);
  const Tensor x = Tensor::randn({1, 3, 16, 16}, g);
  REQUIRE_THROWS_WITH(im.forward(x),
                      Contains(im.layers[i].name) && Contains(im.layers[i - 1].name) && Contains("reads another grid"));
  REQUIRE_THROWS_WITH(im.forward_trace(x), Contains("reads another grid"));
  // The same grid on both sides, but a zero point off it (the padding byte
  // would then leave the GEMM's declared ranges).
  im.layers[i].in = im.layers[i - 1].out;
  im.layers[i].in.bits = im.layers[i - 1].out.bits = 7;
  im.layers[i].in.zero_point = im.layers[i - 1].out.zero_point = 250;
  REQUIRE_THROWS_WITH(im.forward(x),
                      Contains(im.layers[i].name) && Contains("invalid grid") && Contains("zero point 250"));
}

TEST_CASE("integer model: the same bytes on one to three threads at batch 1 to 5", "[quant][integer]") {
  // Fewer images than threads: each image's positions split among the
  // threads in chunks (conv_work); as many or more: whole images each.
  const IntegerModel im = frozen("resnet20", "default", QConfig{}, 32);
  Generator g(11);
  for (const int64_t n : {1, 2, 5}) {
    const Tensor x = Tensor::randn({n, 3, 32, 32}, g);
    Tensor one;
    {
      testing::ThreadsGuard guard(1);
      one = im.forward(x);
    }
    for (const int threads : {2, 3}) {
      testing::ThreadsGuard guard(threads);
      INFO("batch " << n << ", " << threads << " threads");
      REQUIRE(testing::same_bits(im.forward(x), one));
    }
  }
}
