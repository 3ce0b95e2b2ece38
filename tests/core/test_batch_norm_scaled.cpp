// batch_norm_scaled (core/ops/batch_norm.h) against the two ops it fuses,
// scale_channels then batch_norm: the output, the running statistics and
// every gradient bit for bit, training and eval, with and without affine
// parameters, on one and two threads.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>

#include "core/collective.h"
#include "core/ops.h"
#include "tests/test_util.h"

using namespace qat;
using qat::testing::rand_tensor;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return a.sizes() == b.sizes() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

struct Run {
  Tensor y, rm, rv, gx, gs, gw, gb;
};

Tensor activate(const Tensor& y, BnActivation act) {
  return act == BnActivation::relu ? relu(y) : act == BnActivation::relu6 ? relu6(y) : y;
}

// need: which of x, s, weight, bias require gradients. act: the activation
// fused (fused) or applied after (the two ops). gain: the affine weight's
// size, which sets how many outputs pass ReLU6's upper kink.
Run run(bool fused, const Shape& shape, bool training, bool affine, uint64_t seed,
        std::array<bool, 4> need = {true, true, true, true}, BnActivation act = BnActivation::none,
        float gain = 1.f) {
  Tensor x = rand_tensor(shape, seed).detach().set_requires_grad(need[0]);
  Tensor g = rand_tensor(shape, seed + 1).detach();
  Tensor s = add(mul(rand_tensor({shape[1]}, seed + 2).detach(), 0.7f), 1.1f).set_requires_grad(need[1]);
  Tensor w = affine ? mul(rand_tensor({shape[1]}, seed + 3), gain).detach().set_requires_grad(need[2]) : Tensor();
  Tensor b = affine ? rand_tensor({shape[1]}, seed + 4).detach().set_requires_grad(need[3]) : Tensor();
  Run r;
  r.rm = mul(rand_tensor({shape[1]}, seed + 5).detach(), 0.1f);
  r.rv = add(mul(rand_tensor({shape[1]}, seed + 6).detach(), 0.1f), 1.f);
  r.y = fused ? batch_norm_scaled(x, s, w, b, r.rm, r.rv, training, 0.1f, 1e-5f, act)
              : activate(batch_norm(scale_channels(x, s, 1), w, b, r.rm, r.rv, training, 0.1f, 1e-5f), act);
  r.y.backward(g);
  r.gx = need[0] ? x.grad() : Tensor(), r.gs = need[1] ? s.grad() : Tensor();
  if (affine) r.gw = need[2] ? w.grad() : Tensor(), r.gb = need[3] ? b.grad() : Tensor();
  return r;
}

// Every output of a and b the same bits.
void check_same_bits(const Run& a, const Run& b) {
  CHECK(same_bits(a.y, b.y));
  CHECK(same_bits(a.rm, b.rm));
  CHECK(same_bits(a.rv, b.rv));
  CHECK(same_bits(a.gx, b.gx));
  CHECK(same_bits(a.gs, b.gs));
  CHECK(same_bits(a.gw, b.gw));
  CHECK(same_bits(a.gb, b.gb));
}

}  // namespace

TEST_CASE("batch_norm_scaled equals scale_channels then batch_norm bit for bit", "[ops][batchnorm]") {
  for (const Shape& shape : {Shape{4, 3, 5, 7}, Shape{2, 16, 31, 31}, Shape{6, 5}}) {
    for (const bool training : {true, false}) {
      for (const bool affine : {true, false}) {
        for (const int threads : {1, 2}) {
          INFO(shape_str(shape) << (training ? " training" : " eval") << (affine ? " affine" : "") << ", "
                                << threads << " threads");
          qat::testing::ThreadsGuard guard(threads);
          const Run a = run(true, shape, training, affine, 40), b = run(false, shape, training, affine, 40);
          check_same_bits(a, b);
        }
      }
    }
  }
  CHECK_THROWS_WITH(batch_norm_scaled(Tensor::ones({2, 3, 2, 2}), Tensor::ones({4}), Tensor(), Tensor(), Tensor(),
                                      Tensor(), true),
                    Catch::Contains("batch_norm_scaled: expected scale (3) for input [2, 3, 2, 2], got [4]"));
}

TEST_CASE("batch_norm_scaled equals the two ops when only some inputs need gradients", "[ops][batchnorm]") {
  for (const std::array<bool, 4> need : {std::array<bool, 4>{true, false, false, false}, {false, true, false, false},
                                         {false, false, true, true}, {true, false, true, false}}) {
    INFO("x " << need[0] << " s " << need[1] << " weight " << need[2] << " bias " << need[3]);
    const Run a = run(true, {3, 4, 5, 6}, true, true, 70, need), b = run(false, {3, 4, 5, 6}, true, true, 70, need);
    CHECK(same_bits(a.y, b.y));
    CHECK(same_bits(a.gx, b.gx));
    CHECK(same_bits(a.gs, b.gs));
    CHECK(same_bits(a.gw, b.gw));
    CHECK(same_bits(a.gb, b.gb));
  }
}

// How many of y's values are exactly v.
int64_t count_equal(const Tensor& y, float v) {
  int64_t n = 0;
  for (const float e : y.to_vector()) n += e == v;
  return n;
}

TEST_CASE("batch_norm_scaled with a fused ReLU or ReLU6 equals the ops one after another bit for bit",
          "[ops][batchnorm]") {
  for (const BnActivation act : {BnActivation::relu, BnActivation::relu6}) {
    for (const bool training : {true, false}) {
      for (const int threads : {1, 2}) {
        INFO((act == BnActivation::relu ? "relu" : "relu6") << (training ? " training" : " eval") << ", " << threads
                                                            << " threads");
        qat::testing::ThreadsGuard guard(threads);
        const std::array<bool, 4> all{true, true, true, true};
        const Run a = run(true, {4, 6, 9, 9}, training, true, 90, all, act, 8.f);
        const Run b = run(false, {4, 6, 9, 9}, training, true, 90, all, act, 8.f);
        // both kinks are crossed, so the masks are exercised
        CHECK(count_equal(a.y, 0.f) > 50);
        if (act == BnActivation::relu6) CHECK(count_equal(a.y, 6.f) > 50);
        check_same_bits(a, b);
      }
    }
  }
}

// Note [one channel at a time] (core/ops/batch_norm.cpp): unsynchronised,
// each channel runs every pass at once; synchronised, pass by pass with the
// global sums between. Both must compute the same bits.
TEST_CASE("batch norm one channel at a time equals it pass by pass (synchronised, identity sums) bit for bit",
          "[ops][batchnorm]") {
  for (const BnActivation act : {BnActivation::none, BnActivation::relu6}) {
    for (const Shape& shape : {Shape{4, 6, 16, 16}, Shape{3, 5, 3, 3}}) {
      INFO(shape_str(shape) << (act == BnActivation::none ? "" : " relu6"));
      qat::testing::ThreadsGuard guard(2);
      const std::array<bool, 4> all{true, true, true, true};
      const Run alone = run(true, shape, true, true, 120, all, act, 8.f);
      qat::testing::IdentityCollective identity;
      set_collective(&identity);
      set_sync_batch_norm(true);
      const Run synced = run(true, shape, true, true, 120, all, act, 8.f);
      set_sync_batch_norm(false);
      set_collective(nullptr);
      check_same_bits(alone, synced);
    }
  }
}
