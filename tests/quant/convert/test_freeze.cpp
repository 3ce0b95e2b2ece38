// freeze(): QAT model -> integer model; agreement with the fake-quant model
// it came from.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "core/autograd.h"
#include "layers/graph.h"
#include "layers/layers.h"
#include "models/models.h"
#include "quant/convert/compare_layers.h"
#include "quant/convert/freeze.h"
#include "quant/integer/int_forward.h"
#include "quant/integer/ops/fused.h"
#include "quant/sim/fake_quantizer.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"
#include "tests/graph_checks.h"
#include "tests/test_util.h"

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

// How far an integer layer may be from the fake-quant one: at most max_lsb
// steps, on at most a share 1 - min_equal of its outputs. Exact by default:
// the integer model reproduces the fake-quant model bit for bit.
struct Bound {
  double max_lsb = 0, min_equal = 1;
};

// With every layer before it exact, the logits differ from the fake-quant
// model's only by the int32 bias's rounding onto the accumulator grid
// (half a step, s_x s_w[c]) and the float model's own rounding (a small part
// of a step): at most (1/2 + 1/16) of a step in every channel.
void require_logits_within_half_step(Module& m, const IntegerModel& im, const Tensor& x) {
  NoGradGuard ng;
  const IntLayer& last = im.layers.back();
  REQUIRE(last.dequantize);
  const Tensor f = m.forward(x).contiguous(), q = im.forward(x).contiguous();
  REQUIRE(f.sizes() == q.sizes());
  const int64_t C = last.out_channels;
  double worst = 0;  // in steps
  for (int64_t i = 0; i < f.numel(); ++i) {
    const int64_t c = i % C;
    const double step = static_cast<double>(last.in.scale) * last.weight_scale.data<float>()[c];
    worst = std::max(worst, std::abs(static_cast<double>(f.data<float>()[i]) - q.data<float>()[i]) / step);
  }
  INFO("largest logit difference: " << worst << " accumulator steps");
  REQUIRE(worst <= 0.5 + 1.0 / 16);
}

// Per layer (op names in `except` get their own bound), and the logits'
// argmax on every image; with no exceptions, the logits' values too.
void require_agreement(Module& m, const IntegerModel& im, const Tensor& x,
                       const std::map<std::string, Bound>& except = {}) {
  if (except.empty()) require_logits_within_half_step(m, im, x);
  for (const LayerDiff& d : compare_layers(m, im, x)) {
    INFO("layer " << d.name << " (" << d.op << "): " << d.differ << " of " << d.count << " differ, max " << d.max_diff);
    if (d.logits) {
      REQUIRE(d.top1_agree == d.rows);
      continue;
    }
    const auto it = except.find(d.op);
    const Bound b = it == except.end() ? Bound{} : it->second;
    REQUIRE(d.max_diff <= b.max_lsb);
    REQUIRE(1.0 - static_cast<double>(d.differ) / d.count >= b.min_equal);
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
    require_agreement(*m, freeze(*m), x);
  }
  SECTION("tensorrt: int8 symmetric activations, narrow-range weights") {
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("tensorrt"), QConfig{}, 16);
    require_agreement(*m, freeze(*m), x);
  }
  SECTION("power_of_two: pure shifts") {
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("power_of_two"), QConfig{}, 16);
    const IntegerModel im = freeze(*m);
    for (const IntLayer& l : im.layers)
      if ((l.op == IntOp::conv || l.op == IntOp::linear) && !l.dequantize)
        for (int32_t m0 :
             std::vector<int32_t>(l.multiplier.data<int32_t>(), l.multiplier.data<int32_t>() + l.out_channels))
          REQUIRE(m0 == (1 << 30));
    require_agreement(*m, im, x);
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
    // The average pool's ties (sum / count = k + 1/2) rounded up on both sides
    // (Note [a mean rounded onto its grid]): every layer exact.
    require_agreement(*m, im, x);
  }
  SECTION("4-bit LSQ+ (fractional zero points of activations and affine weights)") {
    QConfig q;
    q.method = QuantMethod::lsq_plus;
    q.weight_symmetric = false;  // symmetric weights learn no offset
    q.weight_bits = q.activation_bits = 4;
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), q, 16);
    // Forward passes alone leave the outputs' learned offsets at their
    // initial 0 (only the network input's starts from its data): give the
    // convolutions' outputs fractional zero points, as training would.
    for (auto& [name, mod] : m->named_modules())
      if (auto* fq = dynamic_cast<FakeQuantizer*>(mod);
          fq && fq->learned_offset().defined() && name.find("activation_post_process") != std::string::npos)
        const_cast<Tensor&>(fq->learned_offset()).data<float>()[0] = -0.3f * fq->qparams().scale.data<float>()[0];
    const IntegerModel im = freeze(*m);
    bool input_frac = false, conv_out_frac = false, weight_frac = false;
    for (const IntLayer& l : im.layers) {
      (l.op == IntOp::conv ? conv_out_frac : input_frac) |= std::abs(l.out.zero_frac) > 0.01f;
      if (l.weight_zero_frac.defined())
        for (int64_t c = 0; c < l.out_channels; ++c)
          weight_frac |= std::abs(l.weight_zero_frac.data<float>()[c]) > 0.01f;
    }
    REQUIRE(input_frac);
    REQUIRE(conv_out_frac);
    REQUIRE(weight_frac);
    // The network input is quantized exactly; conv outputs next to a padded
    // border stay up to 2 LSB off: the float model pads with a real 0, which
    // is not on a grid whose zero point is fractional.
    // The average pool passes on what its inputs inherited from the borders
    // (1 LSB); its own ties, on this fractional grid too, round up on both
    // sides (Note [a mean rounded onto its grid]): alone it is exact.
    const Bound border{2, 0.9}, inherited{1, 0.875};
    require_agreement(
        *m, im, x, {{"conv", border}, {"max_pool", border}, {"adaptive_avg_pool", inherited}, {"flatten", inherited}});
    for (const LayerDiff& d : compare_layers(*m, im, x))
      if (d.op == "adaptive_avg_pool") REQUIRE(d.own_max_diff == 0);
  }
  SECTION("4-bit LSQ") {
    QConfig q;
    q.method = QuantMethod::lsq;
    q.weight_bits = q.activation_bits = 4;
    ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), q, 16);
    require_agreement(*m, freeze(*m), x);
  }
}

namespace {
// bn_gain: every BN's weight times this, before the observers see anything.
ModulePtr trained_depthwise_chain(const Backend& b, const QConfig& q, bool relu6 = false, float bn_gain = 1.f) {
  ModulePtr m = testing::depthwise_chain(3, relu6);
  for (auto& [name, mod] : m->named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(mod))
      for (int64_t c = 0; c < bn->weight.numel(); ++c) bn->weight.data<float>()[c] *= bn_gain;
  prepare(*m, b, q);
  m->train();
  Generator g(7);
  NoGradGuard ng;
  for (int i = 0; i < 4; ++i) m->forward(Tensor::randn({8, 3, 16, 16}, g));
  m->eval();
  return m;
}
}  // namespace

TEST_CASE("depthwise convolutions freeze and agree with their fake-quant models", "[quant][freeze]") {
  Generator g(12);
  const Tensor x = Tensor::randn({6, 3, 16, 16}, g);
  auto depthwise_layers = [](const IntegerModel& im) {
    int64_t n = 0;
    for (const IntLayer& l : im.layers) n += l.op == IntOp::conv && l.depthwise();
    return n;
  };
  SECTION("default: uint8 affine activations, int8 per-channel weights") {
    ModulePtr m = trained_depthwise_chain(testing::test_backend("default"), QConfig{});
    const IntegerModel im = freeze(*m);
    REQUIRE(depthwise_layers(im) == 2);
    require_agreement(*m, im, x);
  }
  SECTION("tensorrt: int8 symmetric activations, narrow-range weights") {
    ModulePtr m = trained_depthwise_chain(testing::test_backend("tensorrt"), QConfig{});
    require_agreement(*m, freeze(*m), x);
  }
  SECTION("affine per-tensor weights (non-zero weight zero point)") {
    QConfig q;
    q.weight_symmetric = false;
    q.weight_per_channel = false;
    ModulePtr m = trained_depthwise_chain(testing::test_backend("default"), q);
    const IntegerModel im = freeze(*m);
    bool nonzero = false;
    for (const IntLayer& l : im.layers)
      if (l.op == IntOp::conv && l.depthwise()) nonzero |= l.weight_zero_point.data<int32_t>()[0] != 0;
    REQUIRE(nonzero);
    require_agreement(*m, im, x);
  }
  SECTION("4-bit LSQ") {
    QConfig q;
    q.method = QuantMethod::lsq;
    q.weight_bits = q.activation_bits = 4;
    ModulePtr m = trained_depthwise_chain(testing::test_backend("default"), q);
    require_agreement(*m, freeze(*m), x);
  }
}

TEST_CASE("ReLU6 freezes as an upper clamp at the grid's value of 6 (Note [ReLU6 as a clamp])", "[quant][freeze]") {
  Generator g(13);
  const Tensor x = Tensor::randn({6, 3, 16, 16}, g);
  for (const char* backend : {"default", "tensorrt"}) {
    INFO(backend);
    // BN's gains x16: every block's outputs pass 6.
    ModulePtr m = trained_depthwise_chain(testing::test_backend(backend), QConfig{}, true, 16.f);
    // The observers saw ReLU6's outputs, so 6.0 lies at the top of each grid and the clamp would be the
    // grid's own: give each block's output grid room up to about 10 (a grid calibrated elsewhere),
    // 6.0 then well inside it.
    for (auto& [name, mod] : m->named_modules())
      if (auto* qc = dynamic_cast<QatConv2d*>(mod)) {
        const QParams q = qc->activation_post_process->qparams();
        q.scale.data<float>()[0] = 10.f / static_cast<float>(qc->activation_post_process->config().spec.qmax() -
                                                             q.zero_point.data<int32_t>()[0]);
        qc->activation_post_process->set_qparams(q);
      }
    const IntegerModel im = freeze(*m);
    // The clamps, and outputs that reach them.
    const std::vector<Tensor> trace = im.forward_trace(x);
    int64_t clamped_layers = 0;
    for (size_t i = 0; i < im.layers.size(); ++i) {
      const IntLayer& l = im.layers[i];
      if (l.op != IntOp::conv) continue;
      REQUIRE(l.relu);
      REQUIRE(l.clamp_max < l.out.qmax() - 10);
      const uint8_t top = static_cast<uint8_t>(l.clamp_max + l.out.offset());
      const uint8_t* t = trace[i].data<uint8_t>();
      REQUIRE(*std::max_element(t, t + trace[i].numel()) <= top);
      clamped_layers += std::count(t, t + trace[i].numel(), top) > 0;
    }
    REQUIRE(clamped_layers == 4);
    require_agreement(*m, im, x);
  }
}

// Note [freezing a graph]: ResNet-20 (residual adds with ReLU, 1x1
// downsampling shortcuts) and MobileNetV2 (depthwise convolutions, ReLU6,
// adds without ReLU) frozen from their prepared graphs: every integer layer
// against its node's value in the fake-quant graph (compare_layers), exact,
// the average pool's ties included (Note [a mean rounded onto its grid]);
// every image's top-1.
TEST_CASE("graph models freeze: ResNet-20 and MobileNetV2 agree with their fake-quant models", "[quant][freeze]") {
  struct Arch {
    const char* name;
    int64_t res, adds;
  };
  for (const Arch& a : {Arch{"resnet20", 16, 9}, Arch{"mobilenet_v2", 32, 10}}) {
    INFO(a.name);
    ModulePtr m = trained_qat_model(a.name, testing::test_backend("default"), QConfig{}, a.res);
    const IntegerModel im = freeze(*m);
    int64_t adds = 0, depthwise = 0;
    for (const IntLayer& l : im.layers) adds += l.op == IntOp::add, depthwise += l.op == IntOp::conv && l.depthwise();
    REQUIRE(adds == a.adds);
    REQUIRE((depthwise > 0) == (std::string(a.name) == "mobilenet_v2"));
    Generator gen(3);
    const Tensor x = Tensor::randn({4, 3, a.res, a.res}, gen);
    // compare_layers on a graph: each layer against its node's value (the add: its quantizer node's).
    const std::vector<LayerDiff> diffs = compare_layers(*m, im, x);
    REQUIRE(diffs.size() == im.layers.size());
    testing::require_graph_layers_exact(diffs);
  }
}

TEST_CASE("AlexNet-BN freezes, every GEMM kernel (AMX emulated included) gives the same integers", "[quant][freeze]") {
  ModulePtr m = trained_qat_model("alexnet_bn", testing::test_backend("default"), QConfig{}, 64);
  IntegerModel im = freeze(*m);
  Generator g(2);
  const Tensor x = Tensor::randn({2, 3, 64, 64}, g);
  require_agreement(*m, im, x);
  const std::vector<float> best = im.forward(x).to_vector();
  for (const GemmKernel k : gemm_kernels_here()) {
    CAPTURE(gemm_kernel_name(k));
    im.kernel = k;
    REQUIRE(im.forward(x).to_vector() == best);
  }
}

// The integer conv runs a batch's (image, position) rows in chunks that span
// images, and on AMX passes a chunk's rows under blocks of weight columns
// where the weights are the larger operand (ResNet-18's layer 4 at 32 px: one
// position an image, 4608 x 512 weights, 36 rows: on 1 thread one chunk,
// column-major; on 2 threads, chunks of 18 rows). Each image run alone
// takes none of those paths.
TEST_CASE("an integer model gives a batch's images their logits alone, its conv rows spanning images",
          "[quant][freeze]") {
  ModulePtr m = trained_qat_model("resnet18", testing::test_backend("default"), QConfig{}, 32);
  IntegerModel im = freeze(*m);
  Generator g(4);
  const int64_t n = 36;
  const Tensor x = Tensor::randn({n, 3, 32, 32}, g);
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    testing::ThreadsGuard guard(threads);
    // On two threads the batch's forward runs the stem's conv with its max
    // pool image by image (Note [conv then max pool]); one image alone does not.
    const std::vector<size_t> last_read = last_readers(im.layers);
    bool paired = false;
    for (size_t i = 0; i < im.layers.size(); ++i) paired |= ops::fuses_conv_max_pool(im.layers, i, last_read, n);
    REQUIRE(paired == (threads == 2));
    const Tensor batch = im.forward(x);
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(testing::same_bits(batch.narrow(0, i, 1), im.forward(x.narrow(0, i, 1))));
    }
    // The AMX kernel's paths on any CPU, in its emulation.
    IntegerModel emulated = im;
    emulated.kernel = GemmKernel::amx_emulated;
    REQUIRE(testing::same_bits(emulated.forward(x), batch));
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

TEST_CASE("freeze refuses a stored activation zero point off its grid, naming the quantizer", "[quant][freeze]") {
  ModulePtr m = trained_qat_model("small_cnn", testing::test_backend("default"), QConfig{}, 12);
  for (auto& [name, mod] : m->named_modules())
    if (name == "features.0.activation_post_process")
      dynamic_cast<FakeQuantizer&>(*mod).qparams().zero_point.data<int32_t>()[0] = 300;
  REQUIRE_THROWS_WITH(freeze(*m), Contains("'features.0.activation_post_process'") &&
                                      Contains("stored zero point 300 is off its") && Contains("[0, 255]"));
}
