// QatConv2d with BatchNorm2d (+ReLU) against PyTorch 1.13's
// torch.nn.intrinsic.qat.ConvBn2d / ConvBnReLU2d (`_forward_approximate`),
// weight fake quant = FakeQuantize(MovingAveragePerChannelMinMaxObserver,
// qint8, per_channel_symmetric, [-128, 127], reduce_range=False, c = 0.01),
// from tests/golden/gen_qat_convbn.py (tests/golden/qat_convbn.safetensors).
// Three training steps (two with batch statistics, one after
// freeze_bn_stats) and one eval forward; outputs, the gradients of x, weight,
// conv bias, BN weight and bias, the running statistics, the observer state,
// the weight scale and the fake-quantized folded weight.
//
// Tolerances. The fold differs from PyTorch's in float op order:
//   sf:   gamma * (1 / sqrt(var + eps))  vs PyTorch gamma / sqrt(var + eps)
//   y:    conv * (1 / sf)                vs PyTorch conv / sf
// (each up to 1 ulp per element), and the conv / BN reductions sum in another
// order. So outputs, gradients and statistics are compared normwise
// (max |ours - torch| <= tol * max |torch|, plus an elementwise bound), with
// tol 2e-5 (the observed differences are ~1e-7 relative).
// The folded weight passes through rounding: a 1-ulp difference in w * sf
// could flip a rounding decision (one quantization step, ~1% of the channel's
// range: far outside any float tolerance). The generator makes step 0's fold
// exact (running_var + eps = 4^k, so 1/std is exact and both orders give the
// same sf) because there the moving-average observer's range equals the
// current one and each channel's extreme element sits on the tie
// |w| / scale = 127.5; so step 0's weight scale and quantized weight must
// match bit for bit. In later steps the range is a moving average (no
// element near a tie) and the integer levels round(wq / scale) must all match.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/safetensors.h"
#include "layers/layers.h"
#include "quant/sim/fake_quant.h"
#include "quant/sim/qat_modules.h"

namespace {

using qat::Tensor;
using namespace qat::quant;

const qat::SafetensorsFile& golden() { return qat::testing::golden_file("qat_convbn.safetensors"); }

bool has(const std::string& name) { return golden().tensors.count(name) != 0; }

const Tensor& gget(const std::string& name) { return qat::testing::golden_tensor(golden(), name); }

std::vector<int32_t> gints(const std::string& name) { return qat::testing::int_values(gget(name)); }

// max |a - b| <= tol * M (normwise), M = max(max|b|, floor), and each element
// within tol * M + 4 * tol * |b| (the same, a little looser for large elements).
// floor: the scale of a quantity that is zero up to rounding (the conv bias
// gradient under batch statistics) is that of its neighbours, not its own.
void check_close(const Tensor& actual, const Tensor& expected, double tol, const std::string& what,
                 double floor = 0) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  const std::vector<float> a = actual.to_vector(), e = expected.to_vector();
  double emax = 0, dmax = 0;
  size_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) emax = std::max(emax, std::abs(double(e[i])));
  emax = std::max(emax, floor);
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - double(e[i]));
    if (!(d <= tol * emax + 4 * tol * std::abs(double(e[i])))) ++bad;
    if (!(d <= dmax)) dmax = d, worst = i;
  }
  std::ostringstream msg;
  msg.precision(9);
  msg << what << ": max |diff| " << dmax << " (" << (emax > 0 ? dmax / emax : dmax) << " of max |torch| " << emax
      << ") at " << worst << ": ours " << a[worst] << ", torch " << e[worst] << "; " << bad << "/" << a.size()
      << " elements out of tolerance";
  INFO(msg.str());
  if (std::getenv("QAT_GOLDEN_VERBOSE")) std::fprintf(stderr, "%s\n", msg.str().c_str());
  CHECK(bad == 0);
  CHECK(dmax <= tol * emax);
}

// The integer levels round(wq / scale[c]) per output channel (axis 0) must agree:
// a mismatch is a flipped rounding (or clamping) decision.
void check_levels(const Tensor& wq, const Tensor& scale, const Tensor& wq_ref, const Tensor& scale_ref,
                  const std::string& what) {
  INFO(what);
  REQUIRE(wq.sizes() == wq_ref.sizes());
  const int64_t O = wq.size(0), per = wq.numel() / O;
  const std::vector<float> a = wq.to_vector(), e = wq_ref.to_vector(), s = scale.to_vector(),
                           se = scale_ref.to_vector();
  int64_t flips = 0;
  for (int64_t c = 0; c < O; ++c)
    for (int64_t j = 0; j < per; ++j) {
      const float qa = std::nearbyint(a[c * per + j] / s[c]), qe = std::nearbyint(e[c * per + j] / se[c]);
      if (qa != qe) ++flips;
    }
  INFO(what << ": " << flips << "/" << wq.numel() << " quantization levels differ");
  CHECK(flips == 0);
}

Tensor observer_state(QatConv2d& q, const std::string& name) {
  for (auto& [n, t] : q.weight_fake_quant->named_buffers())
    if (n == name) return t;
  FAIL("weight_fake_quant has no buffer " << name);
  return Tensor();
}

void run_case(const std::string& c) {
  INFO("case " << c);
  // [in, out, k, stride, pad, has_bias, relu, steps]
  const std::vector<int32_t> p = gints(c + ".params");
  REQUIRE(p.size() == 8);
  const bool has_bias = p[5] != 0, relu = p[6] != 0;
  const int steps = p[7];
  const int freeze_at = 2;

  qat::Generator gen(1);
  qat::Conv2d conv({p[0], p[1], p[2], p[3], p[4], 1, 1, has_bias}, gen);
  auto bn = std::make_shared<qat::BatchNorm2d>(p[1]);  // eps 1e-5, momentum 0.1 as PyTorch
  {
    qat::NoGradGuard ng;
    conv.weight.copy_(gget(c + ".init.weight"));
    if (has_bias) conv.bias.copy_(gget(c + ".init.bias"));
    bn->weight.copy_(gget(c + ".init.bn_weight"));
    bn->bias.copy_(gget(c + ".init.bn_bias"));
    bn->running_mean.copy_(gget(c + ".init.bn_rm"));
    bn->running_var.copy_(gget(c + ".init.bn_rv"));
  }
  QuantizerConfig cfg;
  cfg.spec.bits = 8;
  cfg.spec.is_signed = true;
  cfg.spec.symmetric = true;
  cfg.spec.per_channel = true;
  cfg.spec.axis = 0;
  cfg.spec.narrow_range = false;
  cfg.method = QuantMethod::moving_average;
  cfg.averaging_constant = 0.01f;
  cfg.ste = SteKind::clipped;
  QatConv2d q(conv, bn, relu, cfg);  // no output quantizer: PyTorch's fused QAT modules have none
  REQUIRE(q.type_name() == (relu ? "QatConvBnReLU2d" : "QatConvBn2d"));
  REQUIRE(q.weight_fake_quant->qparams().scale.numel() == p[1]);
  q.train();

  const double tol = 2e-5;
  for (int i = 0; i < steps; ++i) {
    const std::string s = c + ".s" + std::to_string(i);
    INFO("step " << i);
    if (i == freeze_at) q.freeze_bn_stats();
    q.zero_grad();
    // The fold this forward uses (running stats before the BN update).
    const Tensor w_fold = q.folded_weight();
    Tensor x = gget(s + ".x").clone();
    x.set_requires_grad(true);
    Tensor y = q.forward(x);
    y.backward(gget(s + ".gy"));

    const QParams used = q.weight_fake_quant->qparams();
    Tensor wq;
    {
      qat::NoGradGuard ng;
      wq = fake_quantize(w_fold, used.scale, used.zero_point, q.weight_fake_quant->config().spec);
    }
    for (int32_t z : std::vector<int32_t>(used.zero_point.data<int32_t>(),
                                          used.zero_point.data<int32_t>() + used.zero_point.numel()))
      REQUIRE(z == 0);
    if (i == 0) {
      qat::testing::check_same_bits(observer_state(q, "min_val"), gget(s + ".obs_min"), s + ".obs_min");
      qat::testing::check_same_bits(observer_state(q, "max_val"), gget(s + ".obs_max"), s + ".obs_max");
      qat::testing::check_same_bits(used.scale, gget(s + ".wscale"), s + ".wscale");
      qat::testing::check_same_bits(wq, gget(s + ".wq"), s + ".wq");
    } else {
      check_close(observer_state(q, "min_val"), gget(s + ".obs_min"), tol, s + ".obs_min");
      check_close(observer_state(q, "max_val"), gget(s + ".obs_max"), tol, s + ".obs_max");
      check_close(used.scale, gget(s + ".wscale"), tol, s + ".wscale");
      check_close(wq, gget(s + ".wq"), tol, s + ".wq");
    }
    check_levels(wq, used.scale, gget(s + ".wq"), gget(s + ".wscale"), s + ".wq levels");

    check_close(y, gget(s + ".y"), tol, s + ".y");
    check_close(x.grad(), gget(s + ".dx"), tol, s + ".dx");
    check_close(q.weight.grad(), gget(s + ".dweight"), tol, s + ".dweight");
    if (has_bias) {
      // With batch statistics the conv bias cancels in BN: its gradient is
      // zero up to rounding (~1e-6 in both), compared on the scale of dbn_bias
      // (the same sum of upstream gradients without the cancellation).
      double floor = 0;
      for (float v : gget(s + ".dbn_bias").to_vector()) floor = std::max(floor, std::abs(double(v)));
      check_close(q.bias.grad(), gget(s + ".dbias"), tol, s + ".dbias", floor);
    }
    check_close(bn->weight.grad(), gget(s + ".dbn_weight"), tol, s + ".dbn_weight");
    check_close(bn->bias.grad(), gget(s + ".dbn_bias"), tol, s + ".dbn_bias");
    check_close(bn->running_mean, gget(s + ".rm"), tol, s + ".running_mean");
    check_close(bn->running_var, gget(s + ".rv"), tol, s + ".running_var");
  }

  // Eval: running statistics, observer off (PyTorch: eval() + disable_observer).
  q.eval();
  const Tensor min_before = observer_state(q, "min_val").clone(), max_before = observer_state(q, "max_val").clone();
  qat::NoGradGuard ng;
  Tensor y = q.forward(gget(c + ".eval.x"));
  check_close(y, gget(c + ".eval.y"), tol, c + ".eval.y");
  qat::testing::check_same_bits(observer_state(q, "min_val"), min_before, "eval leaves the observer alone (min)");
  qat::testing::check_same_bits(observer_state(q, "max_val"), max_before, "eval leaves the observer alone (max)");
}

}  // namespace

TEST_CASE("QAT Conv+BN matches PyTorch ConvBn2d: forward, backward, running stats, observer", "[quant][golden]") {
  REQUIRE(has("convbn.params"));
  run_case("convbn");
}

TEST_CASE("QAT Conv+BN+ReLU matches PyTorch ConvBnReLU2d: forward, backward, running stats, observer",
          "[quant][golden]") {
  REQUIRE(has("convbnrelu.params"));
  run_case("convbnrelu");
}
