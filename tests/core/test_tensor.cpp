// Tensor storage, views, dtype conversion and errors.
#include "tests/test_util.h"

using namespace qat;
using Catch::Matchers::Contains;

TEST_CASE("views share storage and version counter", "[tensor]") {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = t.view({3, 2});
  REQUIRE(v.same_storage(t));
  REQUIRE(v.sizes() == Shape{3, 2});
  REQUIRE(t.view({-1}).sizes() == Shape{6});
  v.fill_(1.f);
  REQUIRE(t.version() == v.version());
  REQUIRE(t.to_vector() == std::vector<float>(6, 1.f));
}

TEST_CASE("narrow makes a strided view, contiguous copies it", "[tensor]") {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor col = t.narrow(1, 1, 2);
  REQUIRE(col.sizes() == Shape{2, 2});
  REQUIRE_FALSE(col.is_contiguous());
  REQUIRE(col.to_vector() == std::vector<float>{1, 2, 4, 5});
  Tensor c = col.contiguous();
  REQUIRE(c.is_contiguous());
  REQUIRE_FALSE(c.same_storage(t));
  REQUIRE_THROWS_WITH(col.view({4}), Contains("not contiguous"));
  REQUIRE(t.narrow(0, 1, 1).is_contiguous());
  REQUIRE_THROWS_WITH(t.narrow(1, 2, 2), Contains("out of bounds") && Contains("[2, 3]"));
  col.copy_(Tensor::zeros({2, 2}));
  REQUIRE(t.to_vector() == std::vector<float>{0, 0, 0, 3, 0, 0});
}

TEST_CASE("dtype conversion rounds half to even and saturates", "[tensor]") {
  Tensor f = Tensor::from_vector({-200.f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 300.f}, {7});
  Tensor i8 = f.to(DType::i8);
  REQUIRE(i8.dtype() == DType::i8);
  std::vector<int> got;
  for (int64_t i = 0; i < 7; ++i) got.push_back(i8.data<int8_t>()[i]);
  REQUIRE(got == std::vector<int>{-128, -2, 0, 0, 2, 2, 127});
  Tensor u8 = f.to(DType::u8);
  REQUIRE(static_cast<int>(u8.data<uint8_t>()[0]) == 0);
  REQUIRE(static_cast<int>(u8.data<uint8_t>()[6]) == 255);
  REQUIRE(u8.to(DType::f32).to_vector()[5] == 2.f);
  REQUIRE_THROWS_WITH(i8.data<float>(), Contains("int8") && Contains("float32"));
}

TEST_CASE("view errors name the shapes", "[tensor]") {
  Tensor t = Tensor::zeros({2, 3});
  REQUIRE_THROWS_WITH(t.view({4, 2}), Contains("[2, 3]") && Contains("[4, 2]"));
  REQUIRE_THROWS_WITH(t.size(2), Contains("out of range"));
  REQUIRE_THROWS_WITH(Tensor::from_vector({1, 2, 3}, {2, 2}), Contains("3 values") && Contains("[2, 2]"));
}

TEST_CASE("ops report shape mismatches with the op name and shapes", "[tensor]") {
  Generator g(1);
  Tensor x = Tensor::randn({2, 3, 8, 8}, g);
  Tensor w = Tensor::randn({4, 5, 3, 3}, g);
  REQUIRE_THROWS_WITH(conv2d(x, w, Tensor(), {}), Contains("conv2d") && Contains("[2, 3, 8, 8]") &&
                                                      Contains("[4, 5, 3, 3]"));
  REQUIRE_THROWS_WITH(add(Tensor::zeros({2, 3}), Tensor::zeros({4})), Contains("add") && Contains("broadcast"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})), Contains("linear") &&
                                                                              Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(cross_entropy(Tensor::zeros({2, 3}), Tensor::from_vector_i32({0, 3}, {2})),
                      Contains("target 3") && Contains("[0, 3)"));
}

TEST_CASE("generator is reproducible and its state round-trips", "[tensor]") {
  Generator a(42), b(42);
  for (int i = 0; i < 5; ++i) REQUIRE(a.next_u64() == b.next_u64());
  auto st = a.state();
  const float u = a.uniform();
  a.set_state(st);
  REQUIRE(a.uniform() == u);
  Generator c(43);
  REQUIRE(c.next_u64() != b.next_u64());
  // below() stays in range; normal() has roughly unit variance
  double s = 0, ss = 0;
  for (int i = 0; i < 20000; ++i) {
    REQUIRE(a.below(7) < 7);
    const double z = a.normal();
    s += z;
    ss += z * z;
  }
  REQUIRE(std::abs(s / 20000) < 0.05);
  REQUIRE(std::abs(ss / 20000 - 1.0) < 0.05);
}

TEST_CASE("topk accuracy counts", "[tensor]") {
  Tensor s = Tensor::from_vector({0.1f, 0.7f, 0.2f, 0.9f, 0.05f, 0.05f}, {2, 3});
  Tensor t = Tensor::from_vector_i32({2, 1}, {2});
  REQUIRE(topk_correct(s, t, 1) == 0);
  // row 0: class 2 is second; row 1: classes 1 and 2 tie, the lower index comes first
  REQUIRE(topk_correct(s, t, 2) == 2);
  Tensor t2 = Tensor::from_vector_i32({2, 2}, {2});
  REQUIRE(topk_correct(s, t2, 2) == 1);
  REQUIRE(topk_correct(s, t2, 3) == 2);
  REQUIRE(argmax(s).data<int32_t>()[1] == 0);
}
