// QAT layers' integer forward (quant.integer_forward, Note [integer forward
// of QAT layers] in quant/int8_training/int8_ops.h): the forward is the exact integer
// sum dequantized once (checked against that formula evaluated here, bit for
// bit, and against the float op within its float-sum bound), the gradients
// are the float op's bit for bit; the device twin's code on the host
// executor equals the CPU op; the prepared model switches per layer and falls
// back to the float op while its quantizers only observe.
#include <cmath>
#include <limits>

#include "tests/core/float_sum_bounds.h"
#include "tests/cuda_test_util.h"
#include "tests/host_exec.h"
#include "tests/test_util.h"

#include "core/autograd.h"
#include "core/ops.h"
#include "models/models.h"
#include "quant/sim/fake_quantizer.h"
#include "quant/int8_training/int8_device.h"
#include "quant/int8_training/int8_ops.h"
#include "quant/sim/int8_training.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

struct Case {
  const char* name;
  Shape x, w;  // a 2-d x: a linear layer
  Conv2dParams p;
  ActGrid grid;
  bool per_channel, bias;
  bool linear() const { return x.size() == 2; }
};

std::vector<Case> cases() {
  const ActGrid u8{0.05f, 3.0, 256}, centred{0.02f, 128.0, 256}, frac{0.03f, 2.4, 16};
  return {
      {"conv 3x3, padding 1, per-channel weights, bias", {2, 3, 7, 6}, {5, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, u8, true,
       true},
      {"conv 11x11 stride 4 padding 2 (AlexNet's conv1)", {2, 3, 23, 23}, {4, 3, 11, 11}, {4, 4, 2, 2, 1, 1, 1}, u8,
       true, true},
      {"conv stride 2x1, dilation 2, per-tensor weight, no bias, zero point 128", {3, 2, 9, 8}, {3, 2, 3, 2},
       {2, 1, 2, 1, 2, 2, 1}, centred, false, false},
      {"conv without padding on a fractional zero point (LSQ+), 16 levels", {2, 4, 5, 5}, {6, 4, 2, 2},
       Conv2dParams{}, frac, true, true},
      {"conv 1x1, 64 outputs (the packed kernels' column block)", {2, 8, 5, 5}, {64, 8, 1, 1}, Conv2dParams{}, u8,
       true, true},
      {"conv 1x1, 70 inputs, 72 positions (the pointwise rows' blocks of 64 crossed)", {2, 70, 9, 8},
       {64, 70, 1, 1}, Conv2dParams{}, u8, true, true},
      {"conv 1x1 at stride 2 (a window of one tap)", {2, 5, 7, 6}, {4, 5, 1, 1}, {2, 2, 0, 0, 1, 1, 1}, u8, true,
       true},
      {"depthwise 3x3, stride 2, padding 1, per-channel weights, bias", {2, 6, 9, 8}, {6, 1, 3, 3},
       {2, 2, 1, 1, 1, 1, 6}, u8, true, true},
      {"depthwise 3x3, dilation 2, padding 2, per-tensor weight, zero point 128", {3, 4, 7, 7}, {4, 1, 3, 3},
       {1, 1, 2, 2, 2, 2, 4}, centred, false, false},
      {"depthwise 2x2 without padding on a fractional zero point (LSQ+): the int32 planes", {2, 4, 6, 5},
       {4, 1, 2, 2}, {1, 1, 0, 0, 1, 1, 4}, frac, true, true},
      {"linear, 70 outputs, 100 inputs", {5, 100}, {70, 100}, Conv2dParams{}, u8, true, true},
      {"linear, one sample, per-tensor weight, no bias", {1, 33}, {3, 33}, Conv2dParams{}, centred, false, false},
  };
}

// The case's operands: x on its grid (integers u), wq = s_w[o] W (W int8).
struct Operands {
  Tensor x, wq, scales, bias;
  std::vector<int64_t> u, w;
};
Operands operands(const Case& c, uint64_t seed) {
  Generator g(seed);
  Operands r;
  r.x = Tensor::empty(c.x);
  for (int64_t i = 0; i < r.x.numel(); ++i) {
    r.u.push_back(static_cast<int64_t>(g.below(static_cast<uint64_t>(c.grid.levels))));
    r.x.data<float>()[i] = static_cast<float>(c.grid.scale * (static_cast<double>(r.u.back()) - c.grid.zero));
  }
  r.scales = c.per_channel ? Tensor::uniform({c.w[0]}, g, 0.005f, 0.02f) : Tensor::full({1}, 0.01f);
  r.wq = Tensor::empty(c.w);
  const int64_t O = c.w[0], K = r.wq.numel() / O;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k) {
      r.w.push_back(static_cast<int64_t>(g.below(256)) - 128);
      r.wq.data<float>()[o * K + k] = r.scales.data<float>()[c.per_channel ? o : 0] * static_cast<float>(r.w.back());
    }
  if (c.bias) r.bias = Tensor::randn({O}, g);
  return r;
}

Tensor int_forward_op(const Case& c, const std::vector<Tensor>& in) {
  return c.linear() ? int_forward_linear(in[0], c.grid, in[1], in[2], in[3], "features.3")
                    : int_forward_conv2d(in[0], c.grid, in[1], in[2], in[3], c.p, "features.3");
}
Tensor float_op(const Case& c, const std::vector<Tensor>& in) {
  return c.linear() ? linear(in[0], in[1], in[3]) : conv2d(in[0], in[1], in[3], c.p);
}

// The formula of the Note, evaluated here from the integers: the padding
// is the real 0.0, i.e. the integer zx; y = float(s_x s_w[o] (sum u W - zx
// sum W)) + b, the product of the scales and the correction in double.
Tensor formula(const Case& c, const Operands& op) {
  const bool lin = c.linear();
  const int64_t N = c.x[0], H = lin ? 1 : c.x[2], W = lin ? 1 : c.x[3];
  const int64_t C = lin ? c.x[1] : c.w[1];  // a depthwise output reads its own channel only
  const int64_t O = c.w[0], KH = lin ? 1 : c.w[2], KW = lin ? 1 : c.w[3];
  const Conv2dParams p = lin ? Conv2dParams{} : c.p;
  const int64_t OH = lin ? 1 : conv_out_size(H, KH, p.stride_h, p.pad_h, p.dil_h, "test");
  const int64_t OW = lin ? 1 : conv_out_size(W, KW, p.stride_w, p.pad_w, p.dil_w, "test");
  const double zx = c.grid.zero;
  Tensor y = Tensor::empty(lin ? Shape{N, O} : Shape{N, O, OH, OW});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          int64_t uw = 0, wsum = 0;
          for (int64_t ci = 0; ci < C; ++ci)
            for (int64_t ky = 0; ky < KH; ++ky)
              for (int64_t kx = 0; kx < KW; ++kx) {
                const int64_t wv = op.w[static_cast<size_t>(((o * C + ci) * KH + ky) * KW + kx)];
                const int64_t iy = oy * p.stride_h - p.pad_h + ky * p.dil_h, ix = ox * p.stride_w - p.pad_w + kx * p.dil_w;
                const bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
                const int64_t ch = C == c.x[1] ? ci : o, CX = c.x[1];
                const int64_t u = inside ? op.u[static_cast<size_t>(((n * CX + ch) * H + iy) * W + ix)]
                                         : static_cast<int64_t>(zx);  // (padded cases have integer zero points)
                uw += u * wv;
                wsum += wv;
              }
          const double s = static_cast<double>(c.grid.scale) *
                           static_cast<double>(op.scales.data<float>()[c.per_channel ? o : 0]);
          const float b = c.bias ? op.bias.data<float>()[o] : 0.f;
          y.data<float>()[((n * O + o) * OH + oy) * OW + ox] =
              static_cast<float>(s * (static_cast<double>(uw) - zx * static_cast<double>(wsum))) + b;
        }
  return y;
}

// The twin's code (int8_device.h) on the host executor: the forward's values.
Tensor emulated_values(const Case& c, const Operands& op) {
  testing::HostExec ex;
  const auto& p = c.p;
  int8_math::Geometry g{c.x[0], c.x[1], 1, 1, c.w[0], 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
  if (!c.linear())
    g = {c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], c.w[2], c.w[3],
         conv_out_size(c.x[2], c.w[2], p.stride_h, p.pad_h, p.dil_h, "test"),
         conv_out_size(c.x[3], c.w[3], p.stride_w, p.pad_w, p.dil_w, "test"),
         p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dil_h, p.dil_w, p.groups};
  Tensor y = int8_device::integer_forward_values(ex, op.x, c.grid, op.wq, op.scales, op.bias, g,
                                                 "quant.integer_forward: layer features.3");
  return c.linear() ? reshape(y, {c.x[0], c.w[0]}) : y;
}

}  // namespace

TEST_CASE("the integer forward is the exact integer sum dequantized once, bit for bit", "[quant][intforward]") {
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const Operands op = operands(c, 11);
      const Tensor got = int_forward_op(c, {op.x, op.wq, op.scales, op.bias});
      REQUIRE(testing::same_bits(got, formula(c, op)));
    }
  }
}

TEST_CASE("the integer forward is within the float op's rounding of it, and its gradients are the float op's",
          "[quant][intforward]") {
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const Operands op = operands(c, 12);
      const std::vector<Tensor> in{op.x, op.wq, op.scales, op.bias};
      const std::vector<bool> no_grad{false, false, true, false};  // the scales take none
      Generator g(5);
      const Tensor gy = Tensor::randn(c.linear() ? Shape{c.x[0], c.w[0]} : formula(c, op).sizes(), g);
      const testing::OpRun got = testing::run_op([&](auto& t) { return int_forward_op(c, t); }, in, gy, Device::cpu,
                                                 no_grad);
      const testing::OpRun want = testing::run_op([&](auto& t) { return float_op(c, t); }, in, gy, Device::cpu,
                                                  no_grad);
      // The float op sums K products in float: within gamma_K of the exact
      // sum (the bias is added after the sum by both).
      const int64_t K = op.wq.numel() / c.w[0];
      const testing::OpRun mag = testing::run_abs([&](auto& t) { return float_op(c, t); },
                                                  {op.x, op.wq, op.scales, Tensor()}, gy, no_grad);
      std::vector<double> tol = testing::sum_bound(mag.y, K);
      // (and both round their final sum with the bias once)
      const std::vector<float> y = want.y.to_vector();
      for (size_t i = 0; i < tol.size(); ++i) tol[i] += std::ldexp(std::fabs(y[i]), -23);
      testing::check_within(got.y, want.y, tol, "forward against the float op");
      for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
        INFO("gradient of input " << i);
        REQUIRE(got.grads[i].defined() == want.grads[i].defined());
        if (got.grads[i].defined()) CHECK(testing::same_bits(got.grads[i], want.grads[i]));
      }
    }
  }
}

TEST_CASE("the integer forward's device twin, emulated on the host, equals the CPU op bit for bit",
          "[quant][intforward][math]") {
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const Operands op = operands(c, 13);
      REQUIRE(testing::same_bits(emulated_values(c, op), int_forward_op(c, {op.x, op.wq, op.scales, op.bias})));
    }
  }
}

TEST_CASE("the integer forward names the layer and the value off the grid", "[quant][intforward][math]") {
  const Case c = cases()[0];
  Operands op = operands(c, 14);
  op.x.data<float>()[17] += 0.01f;  // a fifth of a step off
  // (Catch's combined matchers hold their parts by reference: written out each time)
  REQUIRE_THROWS_WITH(int_forward_op(c, {op.x, op.wq, op.scales, op.bias}),
                      Contains("quant.integer_forward: layer features.3: input value") && Contains("at index 17"));
  REQUIRE_THROWS_WITH(emulated_values(c, op),
                      Contains("quant.integer_forward: layer features.3: input value") && Contains("at index 17"));
  // The layers that make their integers as they read x (a 1x1 layer's rows,
  // a depthwise layer's planes): the first of two values off the grid named.
  for (const Case& d : cases()) {
    const bool reads_x = !d.linear() && d.w[2] * d.w[3] == 1 ? d.p.stride_h == 1 : d.p.groups > 1;
    if (!reads_x) continue;
    INFO(d.name);
    Operands od = operands(d, 14);
    od.x.data<float>()[17] += 0.01f;
    od.x.data<float>()[od.x.numel() - 3] += 0.02f;
    REQUIRE_THROWS_WITH(int_forward_op(d, {od.x, od.wq, od.scales, od.bias}),
                        Contains("quant.integer_forward: layer features.3: input value") && Contains("at index 17"));
  }
  op = operands(c, 14);
  op.wq.data<float>()[2 * 27 + 5] *= 1.5f;  // row 2
  REQUIRE_THROWS_WITH(int_forward_op(c, {op.x, op.wq, op.scales, op.bias}),
                      Contains("quant.integer_forward: layer features.3: weight") && Contains("(row 2)"));
}

TEST_CASE("the integer forward on the GPU equals the CPU op, its gradients the GPU's float op bit for bit",
          "[quant][intforward][cuda]") {
  if (!testing::cuda_device_or_skip()) return;
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const Operands op = operands(c, 15);
      const std::vector<Tensor> in{op.x, op.wq, op.scales, op.bias};
      const std::vector<bool> no_grad{false, false, true, false};
      Generator g(6);
      const Tensor gy = Tensor::randn(formula(c, op).sizes(), g);
      // The scales stay on the host, as a quantizer's.
      auto on_cuda = [&](auto op_fn) {
        return [&, op_fn](const std::vector<Tensor>& t) {
          return op_fn(std::vector<Tensor>{t[0], t[1], op.scales, t[3]});
        };
      };
      const testing::OpRun cpu =
          testing::run_op([&](auto& t) { return int_forward_op(c, t); }, in, gy, Device::cpu, no_grad);
      const testing::OpRun gpu = testing::run_op(on_cuda([&](const std::vector<Tensor>& t) { return int_forward_op(c, t); }),
                                                 in, gy, Device::cuda, no_grad);
      const testing::OpRun gpu_float = testing::run_op(
          on_cuda([&](const std::vector<Tensor>& t) { return float_op(c, t); }), in, gy, Device::cuda, no_grad);
      CHECK(testing::same_bits(gpu.y, cpu.y));
      for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
        INFO("gradient of input " << i);
        REQUIRE(gpu.grads[i].defined() == gpu_float.grads[i].defined());
        if (gpu.grads[i].defined()) CHECK(testing::same_bits(gpu.grads[i], gpu_float.grads[i]));
      }
    }
  }
}

namespace {
// A prepared SmallCNN (observers, per-channel symmetric weights), with or
// without the integer forward; logits and parameter gradients of one step.
struct StepResult {
  Tensor logits;
  std::vector<Tensor> grads;
};
// fake_quant: every quantizer fake-quantizes (else all observe only);
// float_weights / float_activations: those quantizers observe only.
StepResult small_cnn_step(bool integer_forward, bool fake_quant, std::vector<IntegerForwardLayer>* layers = nullptr,
                          bool float_weights = false, bool float_activations = false) {
  ModulePtr m = make_model("small_cnn", 4, 1);
  prepare(*m, testing::test_backend("default"), QConfig{});
  if (integer_forward) {
    auto l = enable_integer_forward(*m);
    if (layers) *layers = l;
  }
  for (auto& [name, mod] : m->named_modules())
    if (auto* fq = dynamic_cast<FakeQuantizer*>(mod))
      fq->set_fake_quant_enabled(fake_quant && !(float_weights && fq->config().is_weight) &&
                                 !(float_activations && !fq->config().is_weight));
  Generator g(6);
  Tensor x = Tensor::randn({8, 3, 12, 12}, g);
  Tensor labels = Tensor::from_vector_i32({0, 1, 2, 3, 0, 1, 2, 3}, {8});
  m->train();
  StepResult r;
  Tensor logits = m->forward(x);
  cross_entropy(logits, labels).backward();
  r.logits = logits.detach();
  for (auto& [n, p] : m->named_parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return r;
}
}  // namespace

TEST_CASE("a prepared model runs its quantized layers' forward on integers, and on floats while only observing",
          "[quant][intforward]") {
  std::vector<IntegerForwardLayer> layers;
  const StepResult ints = small_cnn_step(true, true, &layers);
  REQUIRE(layers.size() == 3);
  for (const auto& l : layers) CHECK(l.float_because.empty());
  const StepResult floats = small_cnn_step(false, true);
  // The same step up to the float convolutions' rounding, which can move a
  // value across a rounding boundary of the next quantizer: close, not equal.
  REQUIRE(!testing::same_bits(ints.logits, floats.logits));
  testing::require_close(ints.logits, floats.logits, 2e-2, 2e-2, "logits");
  // Fake quantization off (observing only): the float ops, bit for bit.
  const StepResult ints_off = small_cnn_step(true, false), floats_off = small_cnn_step(false, false);
  REQUIRE(testing::same_bits(ints_off.logits, floats_off.logits));
  REQUIRE(ints_off.grads.size() == floats_off.grads.size());
  for (size_t i = 0; i < ints_off.grads.size(); ++i)
    if (ints_off.grads[i].defined()) CHECK(testing::same_bits(ints_off.grads[i], floats_off.grads[i]));
  // Only the weights unquantized: the inputs are on their grids, the weights
  // are not, so the float ops again.
  const StepResult ints_fw = small_cnn_step(true, true, nullptr, true), floats_fw = small_cnn_step(false, true, nullptr, true);
  REQUIRE(testing::same_bits(ints_fw.logits, floats_fw.logits));
  // Only the activations unquantized: the weights are on their grids, the
  // inputs are not, so the float ops again, gradients included.
  const StepResult ints_fa = small_cnn_step(true, true, nullptr, false, true);
  const StepResult floats_fa = small_cnn_step(false, true, nullptr, false, true);
  REQUIRE(testing::same_bits(ints_fa.logits, floats_fa.logits));
  for (size_t i = 0; i < ints_fa.grads.size(); ++i)
    if (ints_fa.grads[i].defined()) CHECK(testing::same_bits(ints_fa.grads[i], floats_fa.grads[i]));
}

TEST_CASE("the integer forward keeps float the layers whose operands it cannot take, saying why",
          "[quant][intforward]") {
  SECTION("affine weights everywhere: refused, each layer named with its reason") {
    ModulePtr m = make_model("small_cnn", 4, 1);
    QConfig q;
    q.weight_symmetric = false;
    prepare(*m, testing::test_backend("default"), q);
    REQUIRE_THROWS_WITH(enable_integer_forward(*m),
                        Contains("quant.integer_forward: no quantized layer can run its forward on integers") &&
                            Contains("features.0: 8-bit affine weights") && Contains("fc: 8-bit affine weights"));
    for (auto& [name, mod] : m->named_modules()) {
      if (auto* c = dynamic_cast<QatConv2d*>(mod)) CHECK_FALSE(c->integer_forward());
      if (auto* l = dynamic_cast<QatLinear*>(mod)) CHECK_FALSE(l->integer_forward());
    }
  }
  SECTION("LSQ+ inputs: the padded convolutions stay float, the classifier runs on integers") {
    ModulePtr m = make_model("small_cnn", 4, 1);
    QConfig q;
    q.method = QuantMethod::lsq_plus;
    prepare(*m, testing::test_backend("default"), q);
    const auto layers = enable_integer_forward(*m);
    REQUIRE(layers.size() == 3);
    CHECK_THAT(layers[0].float_because, Contains("padding on an LSQ+ input"));
    CHECK_THAT(layers[1].float_because, Contains("padding on an LSQ+ input"));
    CHECK(layers[2].name == "fc");
    CHECK(layers[2].float_because.empty());
  }
}
