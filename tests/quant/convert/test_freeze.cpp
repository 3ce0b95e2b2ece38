// freeze(): QAT model -> integer model; agreement with the fake-quant model
// it came from.
#include <cmath>
#include <random>

#include "tests/test_util.h"

#include "core/autograd.h"
#include "models/models.h"
#include "quant/convert/compare_layers.h"
#include "quant/convert/freeze.h"
#include "quant/sim/prepare.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

// A prepared model that has seen a few training batches (observers and BN
// statistics set), then put in eval mode.
ModulePtr trained_qat_model(const std::string& arch, const Backend& b, const QConfig& q, int64_t res) {
  ModulePtr m = make_model(arch, 10, 3);
  prepare(*m, b, q);
  m->train();
  Generator g(7);
  NoGradGuard ng;
  for (int i = 0; i < 4; ++i) m->forward(Tensor::randn({8, 3, res, res}, g));
  m->eval();
  return m;
}

// Share of exactly equal outputs and the largest difference, per layer.
void require_agreement(Module& m, const IntegerModel& im, const Tensor& x, double max_lsb, double min_equal) {
  for (const LayerDiff& d : compare_layers(m, im, x)) {
    INFO("layer " << d.name << " (" << d.op << "): " << d.differ << " of " << d.count << " differ, max "
                  << d.max_diff);
    if (d.logits) {
      REQUIRE(d.top1_agree >= d.rows - 1);
      continue;
    }
    if (d.op == "quantize_input") REQUIRE(d.differ == 0);  // the same float arithmetic as fake quant
    REQUIRE(d.max_diff <= max_lsb);
    REQUIRE(1.0 - static_cast<double>(d.differ) / d.count >= min_equal);
  }
}

}  // namespace

TEST_CASE("the integer layers take and return integer tensors only", "[quant][freeze]") {
  ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), QConfig{}, 12);
  const IntegerModel im = freeze(*m);
  Generator g(1);
  const std::vector<Tensor> trace = im.forward_trace(Tensor::randn({2, 3, 12, 12}, g));
  REQUIRE(im.layers.front().op == IntOp::quantize_input);
  REQUIRE(im.layers.back().dequantize);
  for (size_t i = 0; i + 1 < trace.size(); ++i) {
    INFO(im.layers[i].name);
    REQUIRE(trace[i].dtype() == DType::u8);
  }
  REQUIRE(trace.back().dtype() == DType::f32);
  for (const IntLayer& l : im.layers) {
    if (l.op != IntOp::conv && l.op != IntOp::linear) continue;
    REQUIRE(l.weight.dtype() == DType::i8);
    REQUIRE(l.bias.dtype() == DType::i32);
  }
  // A float tensor fed to an integer layer is refused, not converted.
  REQUIRE_THROWS_WITH(im.run_layer(im.layers[1], Tensor::randn({2, 12, 12, 3}, g)), Contains("uint8"));
}

TEST_CASE("frozen models agree with their fake-quant models on every backend", "[quant][freeze]") {
  Generator g(11);
  const Tensor x = Tensor::randn({6, 3, 16, 16}, g);
  SECTION("default: uint8 affine activations, int8 per-channel weights") {
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), QConfig{}, 16);
    require_agreement(*m, freeze(*m), x, 1, 0.97);
  }
  SECTION("tensorrt: int8 symmetric activations, narrow-range weights") {
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("tensorrt"), QConfig{}, 16);
    require_agreement(*m, freeze(*m), x, 1, 0.97);
  }
  SECTION("power_of_two: pure shifts") {
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("power_of_two"), QConfig{}, 16);
    const IntegerModel im = freeze(*m);
    for (const IntLayer& l : im.layers)
      if ((l.op == IntOp::conv || l.op == IntOp::linear) && !l.dequantize)
        for (int32_t m0 : std::vector<int32_t>(l.multiplier.data<int32_t>(),
                                               l.multiplier.data<int32_t>() + l.out_channels))
          REQUIRE(m0 == (1 << 30));
    require_agreement(*m, im, x, 1, 0.97);
  }
  SECTION("affine per-tensor weights (non-zero weight zero point)") {
    QConfig q;
    q.weight_symmetric = false;
    q.weight_per_channel = false;
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), q, 16);
    const IntegerModel im = freeze(*m);
    bool nonzero = false;
    for (const IntLayer& l : im.layers)
      if (l.op == IntOp::conv) nonzero |= l.weight_zero_point.data<int32_t>()[0] != 0;
    REQUIRE(nonzero);
    require_agreement(*m, im, x, 1, 0.97);
  }
  SECTION("4-bit LSQ+ (fractional zero points of activations and weights)") {
    QConfig q;
    q.method = QuantMethod::lsq_plus;
    q.weight_bits = q.activation_bits = 4;
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), q, 16);
    const IntegerModel im = freeze(*m);
    bool act_frac = false, weight_frac = false;
    for (const IntLayer& l : im.layers) {
      act_frac |= std::abs(l.out.zero_frac) > 0.01f;
      if (l.weight_zero_frac.defined())
        for (int64_t c = 0; c < l.out_channels; ++c) weight_frac |= std::abs(l.weight_zero_frac.data<float>()[c]) > 0.01f;
    }
    REQUIRE(act_frac);
    REQUIRE(weight_frac);
    // The network input is quantized exactly; conv outputs next to a padded
    // border stay up to 2 LSB off: the float model pads with a real 0, which
    // is not on a grid whose zero point is fractional.
    require_agreement(*m, im, x, 2, 0.9);
  }
  SECTION("4-bit LSQ") {
    QConfig q;
    q.method = QuantMethod::lsq;
    q.weight_bits = q.activation_bits = 4;
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), q, 16);
    require_agreement(*m, freeze(*m), x, 1, 0.97);
  }
}

TEST_CASE("AlexNet-BN freezes; every GEMM kernel gives the same integers", "[quant][freeze]") {
  ModulePtr m = trained_qat_model("alexnet_bn", testing::test_backend("default"), QConfig{}, 64);
  IntegerModel im = freeze(*m);
  Generator g(2);
  const Tensor x = Tensor::randn({2, 3, 64, 64}, g);
  require_agreement(*m, im, x, 2, 0.9);  // 1-LSB differences compound through 8 layers
  const std::vector<float> best = im.forward(x).to_vector();
  im.kernel = GemmKernel::reference;
  REQUIRE(im.forward(x).to_vector() == best);
  if (best_gemm_kernel() == GemmKernel::avx512_vnni) {
    im.kernel = GemmKernel::avx2;
    REQUIRE(im.forward(x).to_vector() == best);
  }
}

TEST_CASE("freeze names the layer that has no integer form", "[quant][freeze]") {
  Backend b = testing::test_backend("default");
  b.patterns.erase(Pattern::linear);
  b.patterns.erase(Pattern::linear_relu);
  ModulePtr m = make_model("small_cnn", 10, 3);
  prepare(*m, b, QConfig{});
  REQUIRE_THROWS_WITH(freeze(*m), Contains("'fc'") && Contains("float"));
}
