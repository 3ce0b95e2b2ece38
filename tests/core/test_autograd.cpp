// Autograd engine behaviour: accumulation, graph freeing, version counter,
// no-grad mode, shared subexpressions.
#include "tests/test_util.h"

#include <algorithm>

using namespace qat;
using Catch::Matchers::Contains;

TEST_CASE("gradients accumulate into leaves across backward calls", "[autograd]") {
  Tensor x = Tensor::from_vector({1.f, 2.f, 3.f}, {3}).set_requires_grad(true);
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  REQUIRE(x.grad().to_vector() == std::vector<float>{2.f, 4.f, 6.f});
  y.backward();
  REQUIRE(x.grad().to_vector() == std::vector<float>{4.f, 8.f, 12.f});
  x.zero_grad();
  REQUIRE_FALSE(x.grad().defined());
}

TEST_CASE("a second backward through a freed graph is an error", "[autograd]") {
  Tensor x = Tensor::from_vector({1.f, -2.f}, {2}).set_requires_grad(true);
  Tensor y = sum(relu(mul(x, 2.f)));
  y.backward();
  REQUIRE_THROWS_WITH(y.backward(), Contains("second time") && Contains("retain_graph"));
}

TEST_CASE("an in-place change of a tensor saved for backward is detected", "[autograd]") {
  Tensor w = Tensor::from_vector({1.f, 2.f}, {2}).set_requires_grad(true);
  Tensor a = Tensor::from_vector({3.f, 4.f}, {2});
  Tensor y = sum(mul(w, a));  // saves a
  a.mul_(2.f);
  REQUIRE_THROWS_WITH(y.backward(), Contains("modified in place") && Contains("mul"));
}

TEST_CASE("in-place change of a leaf that requires grad is refused outside no-grad", "[autograd]") {
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  REQUIRE_THROWS_WITH(w.fill_(3.f), Contains("leaf"));
  NoGradGuard ng;
  w.fill_(3.f);
  REQUIRE(w.to_vector() == std::vector<float>{3.f, 3.f});
}

TEST_CASE("NoGradGuard records no graph", "[autograd]") {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  {
    NoGradGuard ng;
    Tensor y = mul(x, 2.f);
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(y.grad_fn() == nullptr);
  }
  REQUIRE(mul(x, 2.f).requires_grad());
}

TEST_CASE("a tensor used twice gets the sum of both paths", "[autograd]") {
  // y = sum(x*x + 3x) -> dy/dx = 2x + 3
  Tensor x = Tensor::from_vector({1.f, -1.f, 0.5f}, {3}).set_requires_grad(true);
  Tensor h = mul(x, 3.f);
  Tensor y = sum(add(mul(x, x), h));
  y.backward();
  REQUIRE(x.grad().to_vector() == std::vector<float>{5.f, 1.f, 4.f});
}

TEST_CASE("a branch that contributes no gradient is skipped", "[autograd]") {
  Tensor x = Tensor::from_vector({1.f, 2.f}, {2}).set_requires_grad(true);
  Tensor y = sum(mul(x, 0.f));
  y.backward();
  REQUIRE(x.grad().to_vector() == std::vector<float>{0.f, 0.f});
}

TEST_CASE("backward needs a scalar or an explicit gradient of the right shape", "[autograd]") {
  Tensor x = Tensor::ones({2, 2}).set_requires_grad(true);
  Tensor y = mul(x, 2.f);
  REQUIRE_THROWS_WITH(y.backward(), Contains("scalar") && Contains("[2, 2]"));
  REQUIRE_THROWS_WITH(y.backward(Tensor::ones({3})), Contains("[3]"));
  y.backward(Tensor::ones({2, 2}));
  REQUIRE(x.grad().to_vector() == std::vector<float>(4, 2.f));
  Tensor c = Tensor::ones({1});
  REQUIRE_THROWS_WITH(c.backward(), Contains("does not require grad"));
}

TEST_CASE("the ready hook sees each leaf once, with its whole gradient, before the graph behind it runs",
          "[autograd]") {
  // loss = sum((x*w1)*w2) + sum(w1*w1*3): w1 has three AccumulateGrad nodes
  // (mul(x, w1) and both inputs of mul(w1, w1)), w2 one.
  Tensor x = Tensor::from_vector({1.f, 2.f}, {2});
  Tensor w1 = Tensor::from_vector({0.5f, -1.f}, {2}).set_requires_grad(true);
  Tensor w2 = Tensor::from_vector({3.f, 4.f}, {2}).set_requires_grad(true);
  Tensor loss = add(sum(mul(mul(x, w1), w2)), sum(mul(mul(w1, w1), 3.f)));
  std::vector<std::pair<TensorImpl*, std::vector<float>>> seen;
  {
    GradReadyScope scope([&](TensorImpl* leaf) {
      seen.emplace_back(leaf, Tensor(leaf->grad).to_vector());
    });
    loss.backward();
  }
  REQUIRE(seen.size() == 2);  // one call per leaf
  // d/dw1 = x*w2 + 6*w1 = {3+3, 8-6}; d/dw2 = x*w1 = {0.5, -2}
  for (const auto& [leaf, g] : seen) {
    if (leaf == w1.impl_ptr()) REQUIRE(g == std::vector<float>{6.f, 2.f});
    else REQUIRE((leaf == w2.impl_ptr() && g == std::vector<float>{0.5f, -2.f}));
  }
  // The hook is gone with its scope.
  Tensor y = sum(mul(w2, 2.f));
  y.backward();
  REQUIRE(seen.size() == 2);
}

TEST_CASE("the ready hook fires for a leaf early in a chain, before the leaves behind it", "[autograd]") {
  // loss = sum((x*w1)*w2): w2's gradient is complete while w1's is not yet computed.
  Tensor x = Tensor::from_vector({1.f, 2.f}, {2});
  Tensor w1 = Tensor::from_vector({0.5f, -1.f}, {2}).set_requires_grad(true);
  Tensor w2 = Tensor::from_vector({3.f, 4.f}, {2}).set_requires_grad(true);
  Tensor loss = sum(mul(mul(x, w1), w2));
  std::vector<TensorImpl*> order;
  bool w1_grad_when_w2_ready = true;
  GradReadyScope scope([&](TensorImpl* leaf) {
    order.push_back(leaf);
    if (leaf == w2.impl_ptr()) w1_grad_when_w2_ready = w1.grad().defined();
  });
  loss.backward();
  REQUIRE(order == std::vector<TensorImpl*>{w2.impl_ptr(), w1.impl_ptr()});
  REQUIRE_FALSE(w1_grad_when_w2_ready);
}

TEST_CASE("the ready hook fires for a leaf whose only path brings no gradient", "[autograd]") {
  // An op whose backward gives w no gradient: w's AccumulateGrad node is
  // skipped, and the hook must still report w (its buckets wait on it).
  Tensor w = Tensor::from_vector({1.f, 2.f}, {2}).set_requires_grad(true);
  Tensor v = Tensor::from_vector({3.f}, {1}).set_requires_grad(true);
  Tensor blocked = record(w.detach().clone(), "no_gradient", {&w},
                          [](const Tensor&, const NeedGrad&) { return TensorList{Tensor()}; });
  Tensor loss = add(sum(mul(v, 2.f)), sum(blocked));
  std::vector<TensorImpl*> seen;
  GradReadyScope scope([&](TensorImpl* leaf) { seen.push_back(leaf); });
  loss.backward();
  REQUIRE(seen.size() == 2);
  REQUIRE(std::count(seen.begin(), seen.end(), w.impl_ptr()) == 1);
  REQUIRE_FALSE(w.grad().defined());
}
