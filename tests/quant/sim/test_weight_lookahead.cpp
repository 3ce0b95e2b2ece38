// Note [weight lookahead] (quant/sim/weight_lookahead.h): a weight's fake
// quantization computed inside SGD's update equals the one its forward would
// compute, bit for bit, and is dropped whenever something it depends on
// changed in between.
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/test_util.h"

#include "core/autograd.h"
#include "core/threads.h"
#include "models/models.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "quant/observe/minmax.h"
#include "quant/sim/fake_quantizer.h"
#include "quant/sim/prepare.h"
#include "quant/sim/weight_lookahead.h"

using namespace qat;
using namespace qat::quant;

namespace {

// Restores the process-wide switch however a test ends.
struct LookaheadSwitch {
  explicit LookaheadSwitch(bool on) { set_weight_lookahead_enabled(on); }
  ~LookaheadSwitch() { set_weight_lookahead_enabled(true); }
};

QuantizerConfig weight_config(QuantMethod method, int bits, bool symmetric) {
  QuantizerConfig cfg;
  cfg.method = method;
  cfg.spec.per_channel = true;
  cfg.spec.axis = 0;
  cfg.spec.bits = bits;
  cfg.spec.symmetric = symmetric;
  cfg.averaging_constant = 0.25f;
  cfg.is_weight = true;
  return cfg;
}

// What one step of a weight's training leaves behind.
struct StepRecord {
  Tensor y, grad, weight, scale, zero_point, min_val, max_val;
};

// `steps` steps of SGD on sum(FQ(w) * r), a weight quantizer in training
// mode; before each forward but the first, `between` may touch things.
std::vector<StepRecord> train_weight(bool lookahead, const QuantizerConfig& cfg, const Shape& shape, int steps,
                                     const std::function<void(int, Tensor&, FakeQuantizer&)>& between = {}) {
  LookaheadSwitch on(lookahead);
  Generator gen(21);
  Tensor w = Tensor::randn(shape, gen);
  w.data<float>()[3] = 40.f;  // far outside its row: clipped until the averaging observer catches up
  w.set_requires_grad(true);
  auto fq = make_fake_quantizer(cfg, shape[0]);
  fq->train();
  SGD sgd({{"default", {w}, 0.05, 1e-3}}, SGDOptions{0.9});
  std::vector<StepRecord> out;
  for (int step = 0; step < steps; ++step) {
    if (between && step > 0) between(step, w, *fq);
    Tensor y = fq->forward(w);
    const Tensor r = Tensor::randn(shape, gen);
    sum(mul(y, r)).backward();
    const auto& obs = dynamic_cast<const MinMaxStateObserver&>(dynamic_cast<ObserverFakeQuantizer&>(*fq).observer());
    out.push_back({y.detach().clone(), w.grad().clone(), Tensor(), fq->qparams().scale.clone(),
                   fq->qparams().zero_point.clone(), obs.min_val().clone(), obs.max_val().clone()});
    sgd.step();
    sgd.zero_grad();
    out.back().weight = w.detach().clone();
  }
  return out;
}

void require_same_records(const std::vector<StepRecord>& a, const std::vector<StepRecord>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t s = 0; s < a.size(); ++s) {
    INFO("step " << s);
    testing::check_same_bits(a[s].y, b[s].y, "fake-quantized weight");
    testing::check_same_bits(a[s].grad, b[s].grad, "weight gradient (the STE mask)");
    testing::check_same_bits(a[s].weight, b[s].weight, "weight after the step");
    testing::check_same_bits(a[s].scale, b[s].scale, "scale");
    testing::check_same_bits(a[s].zero_point.to(DType::f32), b[s].zero_point.to(DType::f32), "zero point");
    testing::check_same_bits(a[s].min_val, b[s].min_val, "observer min_val");
    testing::check_same_bits(a[s].max_val, b[s].max_val, "observer max_val");
  }
}

}  // namespace

// Both observers, 8 and 4 bits, symmetric and affine, a row length that is
// not a multiple of 16, rows not filling SGD's blocks, 1 and 2 threads; and
// a weight beyond 64 MB (its rows streamed past the caches).
TEST_CASE("weight lookahead: the same outputs, gradients and observer states as quantizing at the forward",
          "[quant][qat][lookahead]") {
  struct Case {
    QuantMethod method;
    int bits;
    bool symmetric;
    Shape shape;
    int threads;
  };
  const std::vector<Case> cases{{QuantMethod::moving_average, 8, true, {37, 300}, 1},
                                {QuantMethod::moving_average, 4, false, {64, 3, 5, 5}, 2},
                                {QuantMethod::minmax, 8, false, {200, 1000}, 2},
                                {QuantMethod::minmax, 4, true, {5, 20000}, 1},
                                {QuantMethod::moving_average, 8, true, {1040, 16384}, 2}};
  for (const Case& c : cases) {
    INFO(method_name(c.method) << " " << c.bits << " bits, " << (c.symmetric ? "symmetric" : "affine") << ", "
                               << shape_str(c.shape) << ", " << c.threads << " threads");
    set_num_threads(c.threads);
    const QuantizerConfig cfg = weight_config(c.method, c.bits, c.symmetric);
    const int steps = c.shape[0] * c.shape[1] > 10'000'000 ? 3 : 5;
    const int64_t taken_before = weight_lookahead_taken();
    const std::vector<StepRecord> ahead = train_weight(true, cfg, c.shape, steps);
    CHECK(weight_lookahead_taken() - taken_before == steps - 1);  // every forward after the first
    const int64_t taken_off = weight_lookahead_taken();
    const std::vector<StepRecord> plain = train_weight(false, cfg, c.shape, steps);
    CHECK(weight_lookahead_taken() == taken_off);
    require_same_records(ahead, plain);
    int64_t clipped = 0;
    for (const StepRecord& r : ahead)
      for (float g : r.grad.to_vector()) clipped += g == 0.f;
    // The STE mask stopped something, except on a running min/max's affine
    // grid, which always holds the weight.
    if (c.symmetric || c.method == QuantMethod::moving_average) CHECK(clipped > 0);
  }
  set_num_threads(1);
}

TEST_CASE("weight lookahead: a result is dropped when the weight or the observer changed after the step",
          "[quant][qat][lookahead]") {
  const QuantizerConfig cfg = weight_config(QuantMethod::moving_average, 8, false);
  const Shape shape{16, 50};
  using Between = std::function<void(int, Tensor&, FakeQuantizer&)>;
  const std::vector<std::pair<std::string, Between>> changes{
      {"the weight written in place",
       [](int step, Tensor& w, FakeQuantizer&) {
         NoGradGuard ng;
         if (step == 2) w.mul_(0.5f);
       }},
      {"the observer's state loaded",
       [](int step, Tensor&, FakeQuantizer& fq) {
         if (step != 2) return;
         TensorMap state = fq.state_dict();
         Tensor mx = state.at("max_val").clone();
         mx.mul_(2.f);
         state["max_val"] = mx;
         fq.load_state_dict(state);
       }},
      {"an eval forward in between",
       [](int step, Tensor& w, FakeQuantizer& fq) {
         if (step != 2) return;
         fq.eval();
         NoGradGuard ng;
         fq.forward(w);
         fq.train();
       }},
      {"the observer switched off and on",
       [](int step, Tensor& w, FakeQuantizer& fq) {
         if (step != 2) return;
         fq.set_observer_enabled(false);
         fq.forward(w);
         fq.set_observer_enabled(true);
       }}};
  for (const auto& [what, change] : changes) {
    INFO(what);
    const int64_t before = weight_lookahead_taken();
    const std::vector<StepRecord> ahead = train_weight(true, cfg, shape, 4, change);
    CHECK(weight_lookahead_taken() - before == 2);  // steps 1 and 3; step 2's was dropped
    require_same_records(ahead, train_weight(false, cfg, shape, 4, change));
  }
}

TEST_CASE("weight lookahead: a weight turned infinite by the step fails at the forward as before",
          "[quant][qat][lookahead]") {
  const QuantizerConfig cfg = weight_config(QuantMethod::minmax, 8, true);
  std::vector<std::string> messages;
  for (bool lookahead : {true, false}) {
    LookaheadSwitch on(lookahead);
    Tensor w = Tensor::ones({4, 20});
    w.set_requires_grad(true);
    auto fq = make_fake_quantizer(cfg, 4);
    fq->train();
    SGD sgd({{"default", {w}, 1.0, 0.0}});
    sum(fq->forward(w)).backward();
    w.grad().data<float>()[25] = -std::numeric_limits<float>::infinity();
    sgd.step();  // w[25] = +inf
    try {
      fq->forward(w);
      FAIL("an infinite weight was fake-quantized");
    } catch (const Error& e) {
      messages.push_back(e.what());
    }
  }
  CHECK_THAT(messages[0], Catch::Matchers::Contains("not finite"));
  CHECK(messages[0] == messages[1]);
}

// With SGD and with AdamW (both update element by element, so both hand
// rows to the hook).
TEST_CASE("weight lookahead: a prepared model trains to the same state with and without it",
          "[quant][qat][lookahead]") {
  Backend backend;
  backend.name = "test";
  backend.patterns = {Pattern::conv_bn_relu, Pattern::conv_relu, Pattern::linear, Pattern::linear_relu};
  for (const bool adamw : {false, true}) {
    INFO((adamw ? "AdamW" : "SGD"));
    std::vector<TensorMap> states;
    int64_t taken = 0;
    for (bool lookahead : {true, false}) {
      LookaheadSwitch on(lookahead);
      ModulePtr m = make_model("small_cnn", 4, 0);
      prepare(*m, backend, QConfig{});
      m->train();
      std::unique_ptr<Optimizer> opt;
      if (adamw) opt = std::make_unique<AdamW>(make_param_groups(m->named_parameters(), 1e-3, 1e-2, true));
      else opt = std::make_unique<SGD>(make_param_groups(m->named_parameters(), 0.05, 1e-4, true), SGDOptions{0.9});
      Generator g(5);
      const int64_t before = weight_lookahead_taken();
      for (int step = 0; step < 4; ++step) {
        const Tensor x = Tensor::randn({4, 3, 16, 16}, g);
        const Tensor target = Tensor::from_vector_i32({0, 1, 2, 3}, {4});
        cross_entropy(m->forward(x), target).backward();
        opt->step();
        opt->zero_grad();
        if (step == 1) {  // an evaluation in between, as after an epoch
          m->eval();
          NoGradGuard ng;
          m->forward(x);
          m->train();
        }
      }
      if (lookahead) taken = weight_lookahead_taken() - before;
      states.push_back(m->state_dict());
    }
    CHECK(taken >= 2);  // the linear layer's weight, at least at steps 1 and 3
    REQUIRE(states[0].size() == states[1].size());
    for (const auto& [name, t] : states[0]) {
      INFO(name);
      REQUIRE(testing::same_bits(t, states[1].at(name)));
    }
  }
}

TEST_CASE("weight lookahead: a quantizer hooks the weight it last observed, and only that one",
          "[quant][qat][lookahead]") {
  const QuantizerConfig cfg = weight_config(QuantMethod::minmax, 8, true);
  Generator gen(8);
  Tensor a = Tensor::randn({4, 20}, gen), b = Tensor::randn({4, 20}, gen);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  auto fq = make_fake_quantizer(cfg, 4);
  fq->train();
  fq->forward(a);
  CHECK(a.update_hook() != nullptr);
  fq->forward(b);
  CHECK(a.update_hook() == nullptr);
  CHECK(b.update_hook() != nullptr);
  {
    auto other = make_fake_quantizer(cfg, 4);  // b is the first one's: the second computes at its forward
    other->train();
    const RowUpdateHook* first = b.update_hook();
    other->forward(b);
    CHECK(b.update_hook() == first);
  }
  fq.reset();  // a quantizer that goes takes its hook with it
  CHECK(b.update_hook() == nullptr);
}
