// Finite-difference gradient checks of every op's backward.
#include "tests/test_util.h"

using namespace qat;
using qat::testing::distinct_tensor;
using qat::testing::gradcheck;
using qat::testing::rand_tensor;
using V = std::vector<Tensor>;

TEST_CASE("gradcheck: elementwise ops with broadcasting", "[gradcheck]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4, 5}, {1, 3, 1, 1}}, {{3, 1}, {1, 4}}, {{2, 3}, {}}, {{4}, {2, 3, 4}}};
  uint64_t seed = 1;
  for (auto& [sa, sb] : shapes) {
    DYNAMIC_SECTION("shapes " << shape_str(sa) << " " << shape_str(sb)) {
      Tensor a = rand_tensor(sa, seed++), b = rand_tensor(sb, seed++);
      gradcheck([](const V& v) { return add(v[0], v[1]); }, {a, b});
      gradcheck([](const V& v) { return sub(v[0], v[1]); }, {a, b});
      gradcheck([](const V& v) { return mul(v[0], v[1]); }, {a, b});
      // keep the divisor away from zero
      Tensor d = add(mul(b.detach(), 0.1f), 2.f).set_requires_grad(true);
      gradcheck([](const V& v) { return div(v[0], v[1]); }, {a, d});
    }
  }
  Tensor x = rand_tensor({3, 4}, 9);
  gradcheck([](const V& v) { return add(mul(v[0], 3.f), -1.5f); }, {x});
  gradcheck([](const V& v) { return neg(v[0]); }, {x});
}

TEST_CASE("gradcheck: relu away from the kink", "[gradcheck]") {
  gradcheck([](const V& v) { return relu(v[0]); }, {distinct_tensor({2, 3, 5}, 3)});
}

TEST_CASE("gradcheck: relu6 on both sides of both kinks", "[gradcheck]") {
  // -2.93 + 0.37 i: none within 0.02 of 0 or 6, beyond either end too.
  std::vector<float> v(30);
  for (int i = 0; i < 30; ++i) v[static_cast<size_t>((i * 7) % 30)] = -2.93f + 0.37f * static_cast<float>(i);
  Tensor x = Tensor::from_vector(v, {2, 3, 5}).set_requires_grad(true);
  gradcheck([](const V& a) { return relu6(a[0]); }, {x});
}

TEST_CASE("relu6: its values and its gradient at the kinks, as PyTorch's ReLU6", "[core]") {
  Tensor x = Tensor::from_vector({-1.f, 0.f, 2.5f, 6.f, 7.f}, {5}).set_requires_grad(true);
  Tensor y = relu6(x);
  CHECK(y.to_vector() == std::vector<float>{0.f, 0.f, 2.5f, 6.f, 6.f});
  sum(y).backward();
  CHECK(x.grad().to_vector() == std::vector<float>{0.f, 0.f, 1.f, 0.f, 0.f});  // hardtanh: 0 at both kinks
}

TEST_CASE("gradcheck: hardswish on its three pieces, away from -3 and 3", "[gradcheck]") {
  std::vector<float> v(30);
  for (int i = 0; i < 30; ++i) v[static_cast<size_t>((i * 11) % 30)] = -4.93f + 0.33f * static_cast<float>(i);
  gradcheck([](const V& a) { return hardswish(a[0]); }, {Tensor::from_vector(v, {5, 6}).set_requires_grad(true)});
}

TEST_CASE("hardswish: values and gradients at the kinks as PyTorch 1.13's", "[core]") {
  // torch.nn.functional.hardswish of these, and the gradient of its sum
  Tensor x = Tensor::from_vector({-4.f, -3.f, -1.5f, 0.f, 1.f, 3.f, 4.f}, {7}).set_requires_grad(true);
  Tensor y = hardswish(x);
  CHECK(y.to_vector() == std::vector<float>{-0.f, -0.f, -0.375f, 0.f, 0.6666666865348816f, 3.f, 4.f});
  CHECK(std::signbit(y.to_vector()[0]));  // -0.0, as PyTorch's x * clamp(x + 3, 0, 6) / 6
  sum(y).backward();
  CHECK(x.grad().to_vector() == std::vector<float>{0.f, -0.5f, 0.f, 0.5f, 0.8333333730697632f, 1.5f, 1.f});
}

TEST_CASE("gradcheck: concat along channels and along the batch", "[gradcheck]") {
  const V xs = {rand_tensor({2, 1, 3, 3}, 1), rand_tensor({2, 2, 3, 3}, 2), rand_tensor({2, 3, 3, 3}, 3)};
  gradcheck([](const V& v) { return concat(v, 1); }, xs);
  gradcheck([](const V& v) { return concat(v, 0); }, {rand_tensor({1, 4}, 4), rand_tensor({3, 4}, 5)});
  // An input that needs no gradient gets none; the others theirs.
  Tensor a = rand_tensor({2, 2}, 6, false), b = rand_tensor({2, 3}, 7);
  sum(concat({a, b}, 1)).backward();
  CHECK(!a.grad().defined());
  CHECK(b.grad().to_vector() == std::vector<float>(6, 1.f));
}

TEST_CASE("concat refuses tensors that differ off its dim, naming both", "[core]") {
  using Catch::Matchers::Contains;
  REQUIRE_THROWS_WITH(concat({Tensor::zeros({2, 3, 4, 4}), Tensor::zeros({2, 5, 4, 5})}, 1),
                      Contains("concat: tensor 1") && Contains("[2, 5, 4, 5]") && Contains("[2, 3, 4, 4]") &&
                          Contains("only dim 1 may differ"));
  REQUIRE_THROWS_WITH(concat({}, 1), Contains("concat: no tensors"));
}

TEST_CASE("gradcheck: matmul and linear", "[gradcheck]") {
  gradcheck([](const V& v) { return matmul(v[0], v[1]); }, {rand_tensor({3, 5}, 1), rand_tensor({5, 4}, 2)});
  gradcheck([](const V& v) { return linear(v[0], v[1], v[2]); },
            {rand_tensor({4, 6}, 3), rand_tensor({5, 6}, 4), rand_tensor({5}, 5)});
  gradcheck([](const V& v) { return linear(v[0], v[1]); }, {rand_tensor({1, 6}, 6), rand_tensor({3, 6}, 7)});
}

TEST_CASE("gradcheck: conv2d", "[gradcheck]") {
  struct Case {
    const char* name;
    Shape x, w;
    Conv2dParams p;
    bool bias;
  };
  const std::vector<Case> cases = {
      {"3x3", {2, 3, 5, 5}, {4, 3, 3, 3}, {}, true},
      {"stride2 pad1", {1, 2, 7, 6}, {3, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 1}, true},
      {"11x11 stride4 pad2", {1, 3, 19, 19}, {2, 3, 11, 11}, {4, 4, 2, 2, 1, 1, 1}, true},
      {"dilation2", {1, 2, 7, 7}, {2, 2, 3, 3}, {1, 1, 1, 1, 2, 2, 1}, false},
      {"groups2", {2, 4, 5, 5}, {6, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}, true},
      {"depthwise", {1, 3, 5, 4}, {3, 1, 3, 3}, {1, 2, 1, 0, 1, 1, 3}, true},
      {"depthwise multiplier 2 stride 2", {1, 2, 6, 7}, {4, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 2}, true},
      {"depthwise dilation 2", {2, 2, 7, 6}, {2, 1, 3, 3}, {1, 1, 2, 2, 2, 2, 2}, false},
      {"1x1 stride1", {2, 5, 3, 4}, {4, 5, 1, 1}, {}, true},
      {"1x1 stride2", {2, 3, 5, 5}, {2, 3, 1, 1}, {2, 2, 0, 0, 1, 1, 1}, false},
      {"non-square kernel", {1, 2, 6, 7}, {3, 2, 2, 3}, {1, 2, 1, 0, 1, 1, 1}, true},
  };
  uint64_t seed = 100;
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      V in{rand_tensor(c.x, seed++), rand_tensor(c.w, seed++)};
      if (c.bias) in.push_back(rand_tensor({c.w[0]}, seed++));
      const Conv2dParams p = c.p;
      gradcheck([p](const V& v) { return conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), p); }, in);
    }
  }
}

TEST_CASE("gradcheck: pooling", "[gradcheck]") {
  SECTION("max_pool2d 3x3 stride 2") {
    gradcheck([](const V& v) { return max_pool2d(v[0], {3, 3, 2, 2, 0, 0}); }, {distinct_tensor({2, 2, 7, 7}, 1)});
  }
  SECTION("max_pool2d with padding") {
    gradcheck([](const V& v) { return max_pool2d(v[0], {3, 3, 2, 2, 1, 1}); }, {distinct_tensor({1, 2, 6, 5}, 2)});
  }
  SECTION("max_pool2d 2x2 stride 2") {
    gradcheck([](const V& v) { return max_pool2d(v[0], {2, 2, 2, 2, 0, 0}); }, {distinct_tensor({1, 3, 4, 6}, 3)});
  }
  SECTION("avg_pool2d, count_include_pad both ways") {
    Tensor x = rand_tensor({2, 2, 5, 5}, 4);
    gradcheck([](const V& v) { return avg_pool2d(v[0], {3, 3, 2, 2, 1, 1}, true); }, {x});
    gradcheck([](const V& v) { return avg_pool2d(v[0], {3, 3, 2, 2, 1, 1}, false); }, {x});
  }
  SECTION("adaptive_avg_pool2d down, uneven and up") {
    gradcheck([](const V& v) { return adaptive_avg_pool2d(v[0], 3, 3); }, {rand_tensor({1, 2, 7, 7}, 5)});
    gradcheck([](const V& v) { return adaptive_avg_pool2d(v[0], 3, 2); }, {rand_tensor({2, 1, 5, 5}, 6)});
    gradcheck([](const V& v) { return adaptive_avg_pool2d(v[0], 6, 6); }, {rand_tensor({1, 2, 3, 3}, 7)});
  }
}

TEST_CASE("gradcheck: batch_norm", "[gradcheck]") {
  SECTION("training, 4-D") {
    gradcheck(
        [](const V& v) {
          Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
          return batch_norm(v[0], v[1], v[2], rm, rv, true);
        },
        {rand_tensor({3, 3, 2, 3}, 1), rand_tensor({3}, 2), rand_tensor({3}, 3)});
  }
  SECTION("training, 2-D, no affine") {
    gradcheck([](const V& v) { return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
              {rand_tensor({5, 4}, 4)});
  }
  SECTION("eval with running statistics") {
    Tensor rm = Tensor::from_vector({0.1f, -0.2f}, {2}), rv = Tensor::from_vector({0.5f, 2.f}, {2});
    gradcheck([rm, rv](const V& v) { return batch_norm(v[0], v[1], v[2], rm, rv, false); },
              {rand_tensor({2, 2, 3, 3}, 5), rand_tensor({2}, 6), rand_tensor({2}, 7)});
  }
}

TEST_CASE("gradcheck: batch_norm_scaled (batch norm of x times a per-channel scale)", "[gradcheck]") {
  SECTION("training, 4-D, affine") {
    gradcheck(
        [](const V& v) {
          Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
          return batch_norm_scaled(v[0], v[1], v[2], v[3], rm, rv, true);
        },
        {rand_tensor({3, 3, 2, 3}, 11), add(rand_tensor({3}, 12).detach(), 1.5f).set_requires_grad(true),
         rand_tensor({3}, 13), rand_tensor({3}, 14)});
  }
  SECTION("eval with running statistics") {
    Tensor rm = Tensor::from_vector({0.1f, -0.2f}, {2}), rv = Tensor::from_vector({0.5f, 2.f}, {2});
    gradcheck([rm, rv](const V& v) { return batch_norm_scaled(v[0], v[1], v[2], v[3], rm, rv, false); },
              {rand_tensor({2, 2, 3, 3}, 15), rand_tensor({2}, 16), rand_tensor({2}, 17), rand_tensor({2}, 18)});
  }
}

TEST_CASE("gradcheck: dropout with a fixed mask", "[gradcheck]") {
  // Same seed every call, so every evaluation draws the same mask.
  gradcheck(
      [](const V& v) {
        Generator g(11);
        return dropout(v[0], 0.3f, true, g);
      },
      {rand_tensor({4, 5}, 1)});
}

TEST_CASE("gradcheck: shape ops and reductions", "[gradcheck]") {
  Tensor x = rand_tensor({2, 3, 4}, 1);
  gradcheck([](const V& v) { return reshape(v[0], {4, -1}); }, {x});
  gradcheck([](const V& v) { return flatten(v[0], 1); }, {x});
  gradcheck([](const V& v) { return slice(v[0], 2, 1, 2); }, {x});
  gradcheck([](const V& v) { return sum(v[0]); }, {x});
  gradcheck([](const V& v) { return mean(v[0]); }, {x});
  gradcheck([](const V& v) { return sum(v[0], 1, false); }, {x});
  gradcheck([](const V& v) { return sum(v[0], -1, true); }, {x});
}

TEST_CASE("gradcheck: log_softmax, nll_loss, cross_entropy", "[gradcheck]") {
  Tensor x = rand_tensor({4, 5}, 1);
  Tensor t = Tensor::from_vector_i32({0, 4, 2, 2}, {4});
  gradcheck([](const V& v) { return log_softmax(v[0]); }, {x});
  gradcheck([t](const V& v) { return nll_loss(log_softmax(v[0]), t); }, {x});
  gradcheck([t](const V& v) { return cross_entropy(v[0], t); }, {x});
  gradcheck([t](const V& v) { return cross_entropy(v[0], t, 0.1f); }, {x});
}

TEST_CASE("gradcheck: scale_channels along each axis", "[gradcheck]") {
  for (int64_t axis = 0; axis < 3; ++axis) {
    DYNAMIC_SECTION("axis " << axis) {
      Tensor x = rand_tensor({3, 4, 5}, 10 + axis);
      Tensor s = rand_tensor({x.size(axis)}, 20 + axis);
      gradcheck([axis](const V& v) { return scale_channels(v[0], v[1], axis); }, {x, s});
    }
  }
}
