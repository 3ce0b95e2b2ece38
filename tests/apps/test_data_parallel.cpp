// The gradient buckets of a data-parallel run (apps/data_parallel.h) on a
// recording stand-in for the processes: which sums start when, and what comes
// back. The real launcher is exercised in test_mpi_train.cpp.
#include "tests/test_util.h"

#include "apps/data_parallel.h"
#include "core/autograd.h"

using namespace qat;

namespace {

// Two identical processes: every sum doubles. A started sum lands only at
// wait_all(), so reading a buffer before then sees the old values.
class TwoLikeProcesses final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void sum(double* v, int64_t n) override { for (int64_t i = 0; i < n; ++i) v[i] *= 2; }
  void sum(float* v, int64_t n) override { for (int64_t i = 0; i < n; ++i) v[i] *= 2; }
  void min(float*, int64_t) override {}
  void max(float*, int64_t) override {}
  void start_sum(float* v, int64_t n) override { started.push_back(n), pending.emplace_back(v, n); }
  void wait_all() override {
    for (auto [v, n] : pending) sum(v, n);
    pending.clear();
  }
  std::vector<int64_t> started;  // sizes, in start order
  std::vector<std::pair<float*, int64_t>> pending;
};

Tensor param(int64_t n, float value) {
  Tensor p = Tensor::full({n}, value).set_requires_grad(true);
  p.impl_ptr()->grad = Tensor::full({n}, value + 1).impl_shared();
  return p;
}

}  // namespace

TEST_CASE("gradient buckets start in order as their gradients complete, and bring back the sums", "[dp]") {
  // Forward order a, b, big, c, d; buckets in reverse: [d, c], [big] in place, [b, a].
  Tensor a = param(3, 1.f), b = param(2, 2.f), big = param(apps::kBucketFloats + 1, 3.f), c = param(4, 4.f),
         d = param(5, 5.f);
  TwoLikeProcesses all;
  apps::GradientBuckets buckets({a, b, big, c, d}, all);
  REQUIRE(buckets.bucket_count() == 3);
  buckets.begin_step();
  buckets.ready(c.impl_ptr());
  buckets.ready(a.impl_ptr());  // its bucket waits for the ones before it
  REQUIRE(all.started.empty());
  Tensor input = Tensor::ones({2}).set_requires_grad(true);
  buckets.ready(input.impl_ptr());  // not a parameter: ignored
  REQUIRE(all.started.empty());
  buckets.ready(d.impl_ptr());
  REQUIRE(all.started == std::vector<int64_t>{9});
  buckets.ready(big.impl_ptr());
  REQUIRE(all.started == std::vector<int64_t>{9, apps::kBucketFloats + 1});
  REQUIRE(big.grad().data<float>()[0] == 4.f);  // in flight, untouched until finish
  buckets.ready(b.impl_ptr());
  REQUIRE(all.started == std::vector<int64_t>{9, apps::kBucketFloats + 1, 5});
  buckets.finish();
  REQUIRE(all.pending.empty());
  for (const Tensor& p : {a, b, big, c, d}) {
    const std::vector<float> g = p.grad().to_vector();
    REQUIRE(g == std::vector<float>(g.size(), 2 * (p.data<float>()[0] + 1)));
  }
}

TEST_CASE("gradient buckets not started during backward start at finish, without the missing gradients", "[dp]") {
  Tensor a = param(3, 1.f), b = param(2, 2.f);
  a.impl_ptr()->grad.reset();  // a took no part in this step
  TwoLikeProcesses all;
  apps::GradientBuckets buckets({a, b}, all);
  REQUIRE(buckets.bucket_count() == 1);
  buckets.begin_step();
  buckets.finish();
  REQUIRE(all.started == std::vector<int64_t>{2});
  REQUIRE(b.grad().to_vector() == std::vector<float>{6.f, 6.f});
  REQUIRE_FALSE(a.grad().defined());
}

TEST_CASE("backward with the ready hook starts the last layer's bucket before the first layer's gradient exists",
          "[dp]") {
  // loss = sum((x*w1)*w2) with w1 and w2 in buckets of their own.
  Tensor x = Tensor::full({apps::kBucketFloats}, 0.5f);
  Tensor w1 = Tensor::full({apps::kBucketFloats}, 2.f).set_requires_grad(true);
  Tensor w2 = Tensor::full({apps::kBucketFloats}, 3.f).set_requires_grad(true);
  TwoLikeProcesses all;
  apps::GradientBuckets buckets({w1, w2}, all);
  REQUIRE(buckets.bucket_count() == 2);
  Tensor loss = sum(mul(mul(x, w1), w2));
  std::vector<bool> w1_grad_when_started;
  buckets.begin_step();
  {
    GradReadyScope scope([&](TensorImpl* leaf) {
      const size_t before = all.started.size();
      buckets.ready(leaf);
      if (all.started.size() > before) w1_grad_when_started.push_back(w1.grad().defined());
    });
    loss.backward();
  }
  buckets.finish();
  REQUIRE(w1_grad_when_started == std::vector<bool>{false, true});  // w2's bucket went out first
  REQUIRE(w1.grad().data<float>()[7] == 2 * (0.5f * 3.f));  // twice x * w2
  REQUIRE(w2.grad().data<float>()[7] == 2 * (0.5f * 2.f));  // twice x * w1
}
