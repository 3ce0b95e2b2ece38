// Optimizers and LR schedules against PyTorch (tests/golden/gen_optim.py ->
// tests/golden/optim_golden.txt), parameter groups, and state_dict round trips.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "core/generator.h"
#include "core/threads.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

using namespace qat;

namespace {

// ---------------------------------------------------------------- golden file

using Values = std::vector<double>;
using Step = std::pair<int, int>;  // (step, param)

struct OptimCase {
  std::map<std::string, std::string> conf;
  std::vector<Shape> shapes;
  std::vector<Values> init;
  std::map<Step, Values> grad, expect;
  double num(const std::string& k) const { return std::stod(conf.at(k)); }
};

struct SchedCase {
  std::map<std::string, std::string> conf;
  Values lrs;
};

struct Golden {
  std::map<std::string, OptimCase> optim;
  std::map<std::string, SchedCase> sched;
};

Values numbers(std::istringstream& in) {
  Values v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

std::map<std::string, std::string> key_values(std::istringstream& in) {
  std::map<std::string, std::string> kv;
  for (std::string tok; in >> tok;) {
    const auto eq = tok.find('=');
    kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

Shape parse_shape(const std::string& s) {
  Shape shape;
  std::istringstream in(s);
  for (std::string d; std::getline(in, d, 'x');) shape.push_back(std::stoll(d));
  return shape;
}

const Golden& golden() {
  static const Golden g = [] {
    const std::string path = std::string(QAT_SOURCE_DIR) + "/tests/golden/optim_golden.txt";
    std::ifstream f(path);
    if (!f) FAIL("cannot open " << path << " (run tests/golden/gen_optim.py)");
    Golden out;
    for (std::string line; std::getline(f, line);) {
      std::istringstream in(line);
      std::string type, name;
      if (!(in >> type >> name) || type[0] == '#') continue;
      int step = 0, param = 0;
      if (type == "optim") {
        out.optim[name].conf = key_values(in);
      } else if (type == "init") {
        std::string shape;
        in >> param >> shape;
        out.optim[name].shapes.push_back(parse_shape(shape));
        out.optim[name].init.push_back(numbers(in));
      } else if (type == "grad") {
        in >> step >> param;
        out.optim[name].grad[{step, param}] = numbers(in);
      } else if (type == "expect") {
        in >> step >> param;
        out.optim[name].expect[{step, param}] = numbers(in);
      } else if (type == "sched") {
        out.sched[name].conf = key_values(in);
      } else if (type == "sched_lr") {
        out.sched[name].lrs = numbers(in);
      }
    }
    return out;
  }();
  return g;
}

std::vector<float> to_float(const Values& v) { return std::vector<float>(v.begin(), v.end()); }

// ---------------------------------------------------------------- helpers

std::unique_ptr<Optimizer> make_optimizer(const OptimCase& c, std::vector<Tensor> params) {
  std::vector<ParamGroup> groups{{"default", std::move(params), c.num("lr"), c.num("weight_decay")}};
  if (c.conf.at("kind") == "sgd")
    return std::make_unique<SGD>(groups, SGDOptions{c.num("momentum"), c.num("dampening"), c.num("nesterov") != 0});
  return std::make_unique<AdamW>(groups, AdamWOptions{c.num("beta1"), c.num("beta2"), c.num("eps")});
}

Tensor leaf(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::from_vector(v, shape);
  t.set_requires_grad(true);
  return t;
}

// A small model's worth of parameters and a deterministic gradient per step.
std::vector<Tensor> random_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> ps;
  for (const Shape& s : {Shape{4, 3, 5}, Shape{4}, Shape{7, 5}}) {
    ps.push_back(Tensor::randn(s, gen));
    ps.back().set_requires_grad(true);
  }
  return ps;
}

void set_grads(std::vector<Tensor>& ps, int step) {
  Generator gen(1000 + step);
  for (size_t i = 0; i < ps.size(); ++i) {
    if (step == 0 && i == 1) {
      ps[i].zero_grad();  // no gradient: this parameter's state starts a step later
    } else {
      ps[i].set_grad(Tensor::randn(ps[i].sizes(), gen));
    }
  }
}

std::vector<Tensor> clone_leaves(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) {
    out.push_back(p.clone());
    out.back().set_requires_grad(true);
  }
  return out;
}

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>, double lr)>;

std::vector<std::pair<std::string, Factory>> factories() {
  return {
      {"sgd_nesterov",
       [](std::vector<Tensor> ps, double lr) {
         return std::make_unique<SGD>(std::vector<ParamGroup>{{"default", ps, lr, 1e-3}},
                                      SGDOptions{0.9, 0.0, true});
       }},
      {"adamw",
       [](std::vector<Tensor> ps, double lr) {
         std::vector<Tensor> rest(ps.begin() + 1, ps.end());
         return std::make_unique<AdamW>(
             std::vector<ParamGroup>{{"default", {ps[0]}, lr, 0.05}, {"no_decay", rest, lr * 0.5, 0.0}});
       }},
  };
}

}  // namespace

// ---------------------------------------------------------------- tests

TEST_CASE("SGD and AdamW match torch.optim step by step", "[optim]") {
  REQUIRE(golden().optim.size() >= 7);
  for (const auto& [name, c] : golden().optim) {
    INFO("case " << name);
    std::vector<Tensor> params;
    for (size_t i = 0; i < c.init.size(); ++i) params.push_back(leaf(to_float(c.init[i]), c.shapes[i]));
    auto opt = make_optimizer(c, params);
    const int steps = static_cast<int>(c.num("steps"));
    for (int s = 0; s < steps; ++s) {
      for (size_t i = 0; i < params.size(); ++i) {
        auto g = c.grad.find({s, static_cast<int>(i)});
        if (g == c.grad.end()) {
          params[i].zero_grad();
        } else {
          params[i].set_grad(Tensor::from_vector(to_float(g->second), c.shapes[i]));
        }
      }
      opt->step();
      for (size_t i = 0; i < params.size(); ++i) {
        INFO("step " << s << ", param " << i);
        const std::vector<float> got = params[i].to_vector();
        const Values& want = c.expect.at({s, static_cast<int>(i)});
        REQUIRE(got.size() == want.size());
        for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]).epsilon(1e-6).margin(1e-7));
      }
    }
    CHECK(opt->steps_taken() == steps);
  }
}

TEST_CASE("step bumps the version of updated parameters and skips those without a grad", "[optim]") {
  Tensor a = leaf({1.f, 2.f}, {2}), b = leaf({3.f}, {1});
  SGD opt({{"default", {a, b}, 0.5, 0.0}});
  a.set_grad(Tensor::from_vector({1.f, -2.f}, {2}));
  const uint64_t va = a.version(), vb = b.version();
  opt.step();
  CHECK(a.to_vector() == std::vector<float>{0.5f, 3.f});
  CHECK(b.to_vector() == std::vector<float>{3.f});
  CHECK(a.version() == va + 1);
  CHECK(b.version() == vb);
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

// Weight decay in the SGD variants the torch goldens leave out (no momentum;
// nesterov), worked by hand in values exact in float: p = 1, g = 0, lr 0.5,
// weight decay 0.5, so d = g + wd p = 0.5.
TEST_CASE("SGD weight decay without momentum and with nesterov, by hand", "[optim]") {
  Tensor plain = leaf({1.f}, {1});
  SGD sgd({{"default", {plain}, 0.5, 0.5}});
  plain.set_grad(Tensor::from_vector({0.f}, {1}));
  sgd.step();
  CHECK(plain.to_vector() == std::vector<float>{0.75f});  // 1 - 0.5 * 0.5
  Tensor nag = leaf({1.f}, {1});
  SGD nesterov({{"default", {nag}, 0.5, 0.5}}, SGDOptions{0.5, 0.0, true});
  nag.set_grad(Tensor::from_vector({0.f}, {1}));
  nesterov.step();
  CHECK(nag.to_vector() == std::vector<float>{0.625f});  // buf = d = 0.5; step d + 0.5 buf = 0.75; 1 - 0.5 * 0.75
}

TEST_CASE("large parameters give the same update on 1 and 4 threads", "[optim]") {
  const Shape shape{300, 400};  // above kOptimParallelMin
  REQUIRE(shape_numel(shape) >= kOptimParallelMin);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 4}) {
    set_num_threads(threads);
    Generator gen(7);
    Tensor w = Tensor::randn(shape, gen), v = Tensor::randn(shape, gen);
    w.set_requires_grad(true);
    v.set_requires_grad(true);
    SGD sgd({{"default", {w}, 0.1, 1e-4}}, SGDOptions{0.9});
    AdamW adamw({{"default", {v}, 1e-3, 1e-2}});
    for (int s = 0; s < 3; ++s) {
      w.set_grad(Tensor::randn(shape, gen));
      v.set_grad(Tensor::randn(shape, gen));
      sgd.step();
      adamw.step();
    }
    std::vector<float> r = w.to_vector(), rv = v.to_vector();
    r.insert(r.end(), rv.begin(), rv.end());
    results.push_back(r);
  }
  set_num_threads(1);
  CHECK(results[0] == results[1]);
}

TEST_CASE("LR schedules match torch's schedulers", "[optim]") {
  REQUIRE(golden().sched.size() >= 7);
  for (const auto& entry : golden().sched) {
    const auto& name = entry.first;  // not a structured binding: Clang 14 cannot capture one
    const auto& c = entry.second;
    INFO("schedule " << name);
    auto num = [&](const char* k, double dflt) { return c.conf.count(k) ? std::stod(c.conf.at(k)) : dflt; };
    LrScheduleOptions o;
    const auto kind = enum_from_name<LrScheduleKind>(c.conf.at("kind"));
    REQUIRE(kind.has_value());
    o.kind = *kind;
    o.gamma = num("gamma", o.gamma);
    o.step_size = num("step_size", o.step_size);
    o.total = num("total", o.total);
    o.eta_min = num("eta_min", o.eta_min);
    o.warmup = num("warmup", o.warmup);
    o.warmup_start_factor = num("warmup_start_factor", o.warmup_start_factor);
    if (c.conf.count("milestones")) {
      std::istringstream in(c.conf.at("milestones"));
      for (std::string m; std::getline(in, m, ',');) o.milestones.push_back(std::stod(m));
      std::reverse(o.milestones.begin(), o.milestones.end());  // any order is accepted
    }
    const double base = num("base_lr", 0);
    SGD opt({{"default", {leaf({0.f}, {1})}, base, 0.0}, {"scaled", {leaf({0.f}, {1})}, 2 * base, 0.0}});
    LrSchedule sched(o, opt);
    for (size_t e = 0; e < c.lrs.size(); ++e) {
      INFO("epoch " << e);
      sched.apply(opt, static_cast<double>(e));
      CHECK(opt.param_groups()[0].lr == Approx(c.lrs[e]).epsilon(1e-12).margin(1e-15));
      CHECK(opt.param_groups()[1].lr == Approx(2 * c.lrs[e]).epsilon(1e-12).margin(1e-15));
    }
  }
}

TEST_CASE("LR schedules at fractional positions", "[optim]") {
  SGD opt({{"default", {leaf({0.f}, {1})}, 0.1, 0.0}});
  LrScheduleOptions o;
  o.kind = LrScheduleKind::cosine;
  o.total = 10;
  o.eta_min = 0.1;
  o.warmup = 2;
  o.warmup_start_factor = 0.2;
  LrSchedule cos(o, opt);
  CHECK(cos.factor(1.0) == Approx(0.6));  // halfway through the warmup
  CHECK(cos.factor(2.0) == Approx(1.0));
  CHECK(cos.factor(7.0) == Approx(0.55));  // halfway through the cosine: (1 + eta_min) / 2
  CHECK(cos.factor(12.0) == Approx(0.1));
  CHECK(cos.factor(4.5) < cos.factor(4.0));
  CHECK(cos.factor(4.5) > cos.factor(5.0));
  o = LrScheduleOptions{};
  o.kind = LrScheduleKind::step;
  o.step_size = 3;
  o.gamma = 0.5;
  LrSchedule step(o, opt);
  CHECK(step.factor(2.999) == 1.0);
  CHECK(step.factor(3.0) == 0.5);
  step.apply(opt, 6.5);
  CHECK(opt.param_groups()[0].lr == Approx(0.025));
  CHECK(step.base_lrs() == std::vector<double>{0.1});  // apply() never moves the base
  o.step_size = 0;
  CHECK_THROWS_WITH(LrSchedule(o, opt), Catch::Contains("step_size"));
}

TEST_CASE("make_param_groups splits off biases and BN parameters", "[optim]") {
  Generator gen(3);
  auto p = [&](const Shape& s, bool grad) {
    Tensor t = Tensor::randn(s, gen);
    t.set_requires_grad(grad);
    return t;
  };
  const std::vector<std::pair<std::string, Tensor>> named{
      {"conv.weight", p({4, 3, 3, 3}, true)}, {"conv.bias", p({4}, true)}, {"bn.weight", p({4}, true)},
      {"frozen.weight", p({4, 4}, false)},    {"fc.weight", p({2, 4}, true)}, {"fc.bias", p({2}, true)}};
  auto same = [](const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].impl_ptr() != want[i].impl_ptr()) return false;
    return true;
  };
  const Tensor& conv_w = named[0].second;
  const Tensor& fc_w = named[4].second;

  auto split = make_param_groups(named, 0.1, 5e-4, true);
  REQUIRE(split.size() == 2);
  CHECK(split[0].name == "default");
  CHECK(split[0].lr == 0.1);
  CHECK(split[0].weight_decay == 5e-4);
  CHECK(same(split[0].params, {conv_w, fc_w}));
  CHECK(split[1].name == "no_decay");
  CHECK(split[1].lr == 0.1);
  CHECK(split[1].weight_decay == 0.0);
  CHECK(same(split[1].params, {named[1].second, named[2].second, named[5].second}));

  auto one = make_param_groups(named, 0.1, 5e-4, false);
  REQUIRE(one.size() == 1);
  CHECK(one[0].weight_decay == 5e-4);
  CHECK(same(one[0].params, {conv_w, named[1].second, named[2].second, fc_w, named[5].second}));
}

TEST_CASE("state_dict round trip continues exactly like an uninterrupted run", "[optim]") {
  for (const auto& [name, make] : factories()) {
    INFO("optimizer " << name);
    // Uninterrupted: 4 steps, with the lr changed (as a schedule would) after step 2.
    std::vector<Tensor> ref = random_params(11);
    auto ref_opt = make(ref, 0.05);
    for (int s = 0; s < 4; ++s) {
      if (s == 2)
        for (ParamGroup& g : ref_opt->param_groups()) g.lr *= 0.3;
      set_grads(ref, s);
      ref_opt->step();
    }
    // Interrupted: 2 steps, lr change, save; a fresh optimizer (other lr) over
    // copies of the parameters loads the state and runs the last 2 steps.
    std::vector<Tensor> first = random_params(11);
    auto opt = make(first, 0.05);
    for (int s = 0; s < 2; ++s) {
      set_grads(first, s);
      opt->step();
    }
    for (ParamGroup& g : opt->param_groups()) g.lr *= 0.3;
    const TensorMap state = opt->state_dict();
    CHECK(state.at("optim.steps").dtype() == DType::i32);
    CHECK(state.count("optim.group0.lr") == 1);
    CHECK(state.count("optim.group0.param0.step") == 1);

    std::vector<Tensor> resumed = clone_leaves(first);
    auto fresh = make(resumed, 1.0);
    fresh->load_state_dict(state);
    CHECK(fresh->steps_taken() == 2);
    for (int s = 2; s < 4; ++s) {
      set_grads(resumed, s);
      fresh->step();
    }
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("param " << i);
      CHECK(resumed[i].to_vector() == ref[i].to_vector());
    }
  }
}

TEST_CASE("state_dict names and load errors", "[optim]") {
  std::vector<Tensor> ps = random_params(5);
  SGD opt({{"default", ps, 0.1, 0.0}}, SGDOptions{0.9});
  set_grads(ps, 0);  // parameter 1 gets no gradient: it has no momentum yet
  opt.step();
  const TensorMap state = opt.state_dict();
  CHECK(state.count("optim.group0.param0.momentum") == 1);
  CHECK(state.count("optim.group0.param1.momentum") == 0);
  CHECK(state.at("optim.group0.param2.momentum").sizes() == Shape{7, 5});
  CHECK(state.at("optim.group0.param1.step").sizes() == Shape{1});
  CHECK(opt.state_dict("opt.sgd.").count("opt.sgd.steps") == 1);

  std::vector<Tensor> other = random_params(5);
  SGD fresh({{"default", other, 0.1, 0.0}}, SGDOptions{0.9});

  TensorMap missing = state;
  missing.erase("optim.group0.param2.momentum");
  CHECK_THROWS_WITH(fresh.load_state_dict(missing),
                    Catch::Contains("missing key 'optim.group0.param2.momentum'") && Catch::Contains("[7, 5]"));

  TensorMap wrong = state;
  wrong["optim.group0.param0.momentum"] = Tensor::zeros({2, 2});
  CHECK_THROWS_WITH(fresh.load_state_dict(wrong), Catch::Contains("'optim.group0.param0.momentum'") &&
                                                      Catch::Contains("[2, 2]") && Catch::Contains("[4, 3, 5]"));

  TensorMap extra = state;
  extra["optim.group1.lr"] = Tensor::from_vector({0.1f}, {1});
  CHECK_THROWS_WITH(fresh.load_state_dict(extra), Catch::Contains("unexpected key 'optim.group1.lr'"));

  TensorMap no_steps = state;
  no_steps.erase("optim.steps");
  CHECK_THROWS_WITH(fresh.load_state_dict(no_steps), Catch::Contains("'optim.steps'"));

  // A failed load changes nothing; a good one then succeeds.
  CHECK(fresh.steps_taken() == 0);
  CHECK_NOTHROW(fresh.load_state_dict(state));
  CHECK(fresh.steps_taken() == 1);
}
