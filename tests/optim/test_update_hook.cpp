// Note [update hooks] (core/update_hook.h): an optimizer hands a parameter's
// rows to its hook as it updates them, with the same arithmetic as without.
#include <mutex>
#include <vector>

#include "tests/test_util.h"

#include "core/threads.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

using namespace qat;

namespace {

// Records what the optimizer tells: each row's values when handed over, the
// version at begin and end, and the order of the calls.
class RecordingHook : public RowUpdateHook {
 public:
  explicit RecordingHook(bool accept) : accept_(accept) {}
  bool begin(const Tensor& p) override {
    ++begins;
    version_at_begin = p.version();
    rows_seen.assign(p.size(0), 0);
    len = p.numel() / p.size(0);
    values.assign(p.numel(), 0.f);
    return accept_;
  }
  void rows(int64_t r0, int64_t r1, const float* data) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t r = r0; r < r1; ++r) {
      ++rows_seen[r];
      for (int64_t i = 0; i < len; ++i) values[r * len + i] = data[(r - r0) * len + i];
    }
  }
  void end(const Tensor& p) override {
    ++ends;
    version_at_end = p.version();
  }
  int begins = 0, ends = 0;
  uint64_t version_at_begin = 0, version_at_end = 0;
  int64_t len = 0;
  std::vector<int> rows_seen;
  std::vector<float> values;

 private:
  bool accept_;
  std::mutex mu_;
};

// Two equal random leaf parameters, the first with a recording hook.
struct HookedPair {
  Tensor hooked, plain;
  std::shared_ptr<RecordingHook> hook;
};
HookedPair hooked_and_plain(const Shape& shape, Generator& gen) {
  HookedPair out{Tensor::randn(shape, gen), Tensor(), std::make_shared<RecordingHook>(true)};
  out.plain = out.hooked.clone();
  out.hooked.set_requires_grad(true);
  out.plain.set_requires_grad(true);
  out.hooked.set_update_hook(out.hook);
  return out;
}

struct Variant {
  const char* name;
  SGDOptions opt;
  double weight_decay;
};

}  // namespace

// Row lengths below and above a block (16384 elements), rows not dividing
// into blocks, one row; momentum, nesterov, dampening, plain; 1 and 2 threads.
TEST_CASE("SGD with an update hook updates exactly as without and hands over every row once", "[optim]") {
  const std::vector<Variant> variants{{"plain", SGDOptions{0.0}, 0.0},
                                      {"momentum + wd", SGDOptions{0.9}, 5e-4},
                                      {"nesterov", SGDOptions{0.9, 0.0, true}, 1e-3},
                                      {"dampening", SGDOptions{0.5, 0.25}, 0.0}};
  for (const Shape& shape : {Shape{37, 3, 5, 7}, Shape{1000, 70}, Shape{5, 20000}, Shape{1, 40000}})
    for (const Variant& v : variants)
      for (int threads : {1, 2}) {
        INFO(shape_str(shape) << " " << v.name << ", " << threads << " threads");
        set_num_threads(threads);
        Generator gen(3);
        auto [hooked, plain, hook] = hooked_and_plain(shape, gen);
        SGD a({{"default", {hooked}, 0.05, v.weight_decay}}, v.opt);
        SGD b({{"default", {plain}, 0.05, v.weight_decay}}, v.opt);
        for (int step = 0; step < 3; ++step) {
          const Tensor g = Tensor::randn(shape, gen);
          hooked.set_grad(g.clone());
          plain.set_grad(g.clone());
          const uint64_t before = hooked.version();
          a.step();
          b.step();
          REQUIRE(testing::same_bits(hooked, plain));
          CHECK(hook->rows_seen == std::vector<int>(shape[0], 1));
          CHECK(hook->values == hooked.to_vector());  // each row handed over with its new values
          CHECK(hook->version_at_begin == before);
          CHECK(hook->version_at_end == before + 1);  // end() after the version bump
        }
        CHECK(hook->begins == 3);
        CHECK(hook->ends == 3);
        if (v.opt.momentum != 0.0)
          REQUIRE(testing::same_bits(a.state_dict().at("optim.group0.param0.momentum"),
                                     b.state_dict().at("optim.group0.param0.momentum")));
      }
  set_num_threads(1);
}

// AdamW runs SIMD vectors at fixed positions; row blocks cut them where the
// row length is not a multiple of the vector width (105, 70, 13 here), and
// the parameter's length leaves a scalar tail (13 x 7 = 91).
TEST_CASE("AdamW with an update hook updates exactly as without and hands over every row once", "[optim]") {
  for (const Shape& shape : {Shape{37, 3, 5, 7}, Shape{1000, 70}, Shape{7, 13}, Shape{5, 20000}, Shape{1, 40000}})
    for (int threads : {1, 2}) {
      INFO(shape_str(shape) << ", " << threads << " threads");
      set_num_threads(threads);
      Generator gen(6);
      auto [hooked, plain, hook] = hooked_and_plain(shape, gen);
      AdamW a({{"default", {hooked}, 1e-2, 1e-2}}), b({{"default", {plain}, 1e-2, 1e-2}});
      for (int step = 0; step < 3; ++step) {
        const Tensor g = Tensor::randn(shape, gen);
        hooked.set_grad(g.clone());
        plain.set_grad(g.clone());
        a.step();
        b.step();
        REQUIRE(testing::same_bits(hooked, plain));
        CHECK(hook->rows_seen == std::vector<int>(shape[0], 1));
        CHECK(hook->values == hooked.to_vector());
      }
      for (const char* buffer : {"exp_avg", "exp_avg_sq"}) {
        const std::string key = std::string("optim.group0.param0.") + buffer;
        REQUIRE(testing::same_bits(a.state_dict().at(key), b.state_dict().at(key)));
      }
    }
  set_num_threads(1);
}

namespace {
// An optimizer that updates each parameter as a whole (no span updates).
class WholeSGD : public Optimizer {
 public:
  using Optimizer::Optimizer;

 protected:
  std::vector<std::string> buffer_names() const override { return {}; }
  void update(const ParamGroup& group, float* p, const float* g, int64_t n, ParamState&) override {
    for (int64_t i = 0; i < n; ++i) p[i] -= static_cast<float>(group.lr) * g[i];
  }
  const char* name() const override { return "WholeSGD"; }
};
}  // namespace

TEST_CASE("a hook that declines, or an optimizer without span updates, gets no rows", "[optim]") {
  Generator gen(4);
  Tensor w = Tensor::randn({8, 9}, gen);
  Tensor plain = w.clone();
  w.set_requires_grad(true);
  plain.set_requires_grad(true);
  auto declining = std::make_shared<RecordingHook>(false);
  w.set_update_hook(declining);
  SGD sgd({{"default", {w}, 0.1, 0.0}}), sgd_plain({{"default", {plain}, 0.1, 0.0}});
  w.set_grad(Tensor::randn({8, 9}, gen));
  plain.set_grad(w.grad().clone());
  sgd.step();
  sgd_plain.step();
  CHECK(testing::same_bits(w, plain));
  CHECK(declining->begins == 1);
  CHECK(declining->rows_seen == std::vector<int>(8, 0));
  CHECK(declining->ends == 0);

  // An optimizer without span updates leaves hooks alone.
  auto unused = std::make_shared<RecordingHook>(true);
  w.set_update_hook(unused);
  WholeSGD whole({{"default", {w}, 1e-3, 0.0}});
  const Tensor before = w.detach().clone();
  whole.step();
  CHECK(unused->begins == 0);
  CHECK_FALSE(testing::same_bits(w, before));  // (it did update)
}

TEST_CASE("views and detached copies of a parameter do not carry its update hook", "[optim]") {
  Tensor w = Tensor::zeros({4, 6});
  w.set_update_hook(std::make_shared<RecordingHook>(true));
  CHECK(w.update_hook() != nullptr);
  CHECK(w.detach().update_hook() == nullptr);
  CHECK(w.view({24}).update_hook() == nullptr);
  CHECK(w.narrow(0, 1, 2).update_hook() == nullptr);
  Tensor same = w;  // a handle to the same parameter
  CHECK(same.update_hook() == w.update_hook());
}
