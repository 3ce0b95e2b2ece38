// LSQ / LSQ+ on cuda (quant/sim/lsq.cu). Its backward's per-index bodies
// (math::lsq_slot_backward, math::channel_sum) run here on the host over
// every index against the CPU op: dv bit for bit, the step and offset sums to
// rounding (both sum float terms in double, in other orders: the CPU's
// chunks, the slots here). On a GPU the twin itself is compared with the CPU
// op on the same cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "quant/observe/channel_layout.h"
#include "quant/sim/lsq.h"
#include "quant/sim/lsq_plan.h"
#include "quant/sim/math.h"
#include "tests/cuda_test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

struct Case {
  Shape shape;
  bool per_channel;
  int64_t axis;
  bool plus;
  LsqClip clip;
};

const std::vector<Case> kCases = {
    {{4, 3, 5, 5}, false, 0, false, LsqClip::paper},   // per tensor
    {{6, 3, 3, 3}, true, 0, false, LsqClip::rounded},  // weights per channel
    {{3, 5, 4, 4}, true, 1, true, LsqClip::paper},     // activations per channel, LSQ+
    {{50, 7}, true, 1, true, LsqClip::rounded},        // channels innermost
    {{2, 3000}, false, 0, true, LsqClip::paper},       // long per-tensor rows
};

QuantSpec spec_of(const Case& k) {
  QuantSpec s;
  s.bits = 4;
  s.is_signed = true;
  s.per_channel = k.per_channel;
  s.axis = k.axis;
  s.symmetric = !k.plus;
  return s;
}

struct Setup {
  Tensor v, step, offset, g;
};

// Inputs spread over and beyond the grid (clipped on both sides), a step
// per channel with one negative parameter (sign(p) in dL/dp), gradients.
Setup make(const Case& k, uint64_t seed) {
  Generator gen(seed);
  const int64_t C = k.per_channel ? k.shape[k.axis] : 1;
  std::vector<float> step(C), off(C);
  for (int64_t c = 0; c < C; ++c) {
    step[c] = (c == 1 ? -1.f : 1.f) * (0.05f + 0.01f * static_cast<float>(c % 7));
    off[c] = 0.02f * static_cast<float>(c % 3) - 0.02f;
  }
  Setup s;
  s.v = Tensor::randn(k.shape, gen).mul_(0.6f);
  s.step = Tensor::from_vector(step, {C});
  s.offset = Tensor::from_vector(off, {C});
  s.g = Tensor::randn(k.shape, gen);
  return s;
}

// The CPU op's forward and gradients (dv, dL/dstep, dL/doffset).
std::vector<Tensor> cpu_op(const Case& k, const Setup& s, float grad_scale) {
  Tensor v = s.v.clone().set_requires_grad(true), st = s.step.clone().set_requires_grad(true);
  Tensor off = s.offset.clone().set_requires_grad(true);
  const QuantSpec spec = spec_of(k);
  Tensor y = k.plus ? lsq_plus_quantize(v, st, off, spec, grad_scale, k.clip)
                    : lsq_quantize(v, st, spec, grad_scale, k.clip);
  y.backward(s.g);
  return {y.detach(), v.grad(), st.grad(), k.plus ? off.grad() : Tensor()};
}

// Per channel, a bound of the sum of |terms| of the step and offset sums
// (|term| <= |g| max(|lo|, |hi|), resp. |g|): the scale of their rounding.
// The CPU adds float partials of up to 4096 terms (random-walk error about
// sqrt(4096) 2^-24 = 4e-6 of it); the slots add in double. Checked at 1e-5.
struct SumScale {
  std::vector<double> step, offset;
};
SumScale sum_scale(const Tensor& g, const ChannelGeometry& geo, float lo, float hi) {
  SumScale s{std::vector<double>(geo.channels, 0.0), std::vector<double>(geo.channels, 0.0)};
  const std::vector<float> gv = g.to_vector();
  const double m = std::max(std::abs(lo), std::abs(hi));
  for (size_t i = 0; i < gv.size(); ++i) {
    s.step[geo.channel_of(static_cast<int64_t>(i))] += std::abs(gv[i]) * m;
    s.offset[geo.channel_of(static_cast<int64_t>(i))] += std::abs(gv[i]);
  }
  return s;
}

}  // namespace

TEST_CASE("LSQ on cuda: the backward's per-index bodies give the CPU op's dv exactly and its sums to rounding",
          "[math][quant]") {
  uint64_t seed = 11;
  for (const Case& k : kCases) {
    INFO("shape " << shape_str(k.shape) << ", axis " << k.axis << ", plus " << k.plus);
    const Setup s = make(k, ++seed);
    const float grad_scale = 0.37f;
    const std::vector<Tensor> want = cpu_op(k, s, grad_scale);
    const QuantSpec spec = spec_of(k);
    const ChannelLayout l = ChannelLayout::of(s.v, spec.per_channel, spec.axis);
    const ChannelGeometry geo{l.outer, l.channels, l.inner};
    const LsqChannels ch = lsq_channel_constants(s.step, k.plus ? s.offset : Tensor(), lsq_min_step(spec));
    std::vector<float> inv_beta(ch.inv);
    inv_beta.insert(inv_beta.end(), ch.beta.begin(), ch.beta.end());
    const float lo = static_cast<float>(spec.qmin()), hi = static_cast<float>(spec.qmax());
    for (const int64_t slots : {int64_t{1}, int64_t{7}, slots_for(geo)}) {
      INFO("slots " << slots);
      const int64_t C = geo.channels, n = C * slots;
      std::vector<float> dv(s.v.numel(), NAN);
      std::vector<double> partial(2 * n);
      for (int64_t j = 0; j < n; ++j) {
        auto body = k.plus ? (k.clip == LsqClip::paper ? &math::lsq_slot_backward<true, true>
                                                       : &math::lsq_slot_backward<true, false>)
                           : (k.clip == LsqClip::paper ? &math::lsq_slot_backward<false, true>
                                                       : &math::lsq_slot_backward<false, false>);
        body(s.v.data<float>(), s.g.data<float>(), dv.data(), geo, inv_beta.data(), j / slots, j % slots, slots, lo, hi,
             partial[j], partial[n + j]);
      }
      CHECK(dv == want[1].to_vector());  // every element written once, bit for bit
      const SumScale scale = sum_scale(s.g, geo, lo, hi);
      const std::vector<float> ds = want[2].to_vector();
      for (int64_t c = 0; c < C; ++c) {
        INFO("channel " << c);
        const double step_grad = math::channel_sum(partial.data(), c, slots) * grad_scale * ch.sign[c];
        CHECK(std::abs(step_grad - ds[c]) <= 1e-5 * grad_scale * scale.step[c]);
        if (k.plus) {
          const double offset_grad = math::channel_sum(partial.data() + n, c, slots) * grad_scale;
          CHECK(std::abs(offset_grad - want[3].to_vector()[c]) <= 1e-5 * grad_scale * scale.offset[c]);
        }
      }
    }
  }
}

TEST_CASE("LSQ on cuda: forward and gradients as on the CPU", "[cuda][quant]") {
  if (!testing::cuda_device_or_skip()) return;
  uint64_t seed = 31;
  for (const Case& k : kCases) {
    INFO("shape " << shape_str(k.shape) << ", axis " << k.axis << ", plus " << k.plus);
    const Setup s = make(k, ++seed);
    const std::vector<Tensor> want = cpu_op(k, s, 0.37f);
    Tensor v = s.v.to(Device::cuda).set_requires_grad(true), st = s.step.to(Device::cuda).set_requires_grad(true);
    Tensor off = s.offset.to(Device::cuda).set_requires_grad(true);
    const QuantSpec spec = spec_of(k);
    Tensor y = k.plus ? lsq_plus_quantize(v, st, off, spec, 0.37f, k.clip) : lsq_quantize(v, st, spec, 0.37f, k.clip);
    y.backward(s.g.to(Device::cuda));
    const std::vector<float> yg = y.to_vector(), yc = want[0].to_vector();
    for (size_t i = 0; i < yc.size(); ++i)  // LSQ: exact; LSQ+: q * s + beta may be one FMA on one side
      CHECK(std::abs(yg[i] - yc[i]) <= (k.plus ? 2e-7f * std::max(1.f, std::abs(yc[i])) : 0.f));
    CHECK(v.grad().to_vector() == want[1].to_vector());
    const ChannelLayout l = ChannelLayout::of(s.v, spec.per_channel, spec.axis);
    const SumScale scale = sum_scale(s.g, {l.outer, l.channels, l.inner}, static_cast<float>(spec.qmin()),
                                     static_cast<float>(spec.qmax()));
    const std::vector<float> dsg = st.grad().to_vector(), dsc = want[2].to_vector();
    for (size_t c = 0; c < dsc.size(); ++c) CHECK(std::abs(dsg[c] - dsc[c]) <= 1e-5 * 0.37 * scale.step[c]);
    if (k.plus) {
      const std::vector<float> dbg = off.grad().to_vector(), dbc = want[3].to_vector();
      for (size_t c = 0; c < dbc.size(); ++c) CHECK(std::abs(dbg[c] - dbc[c]) <= 1e-5 * 0.37 * scale.offset[c]);
    }
  }
}

TEST_CASE("LSQ: input, step and offset on different devices are refused naming the op", "[cuda][quant]") {
  QuantSpec spec;
  spec.bits = 4;
  const Tensor v = Tensor::ones({2, 3}), step = Tensor::from_vector({0.1f}, {1});
  testing::CudaOrLabelled vd(v);
  CHECK_THROWS_WITH(lsq_quantize(vd.t, step, spec, 1.f),
                    Catch::Matchers::Contains("lsq_quantize: expected all tensors on one device, but input is on cuda "
                                              "and step is on cpu"));
}
