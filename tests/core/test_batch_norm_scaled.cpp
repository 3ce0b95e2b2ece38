// batch_norm_scaled (core/ops/batch_norm.h) against the two ops it fuses,
// scale_channels then batch_norm: the output, the running statistics and
// every gradient bit for bit, training and eval, with and without affine
// parameters, on one and two threads.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>

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

// need: which of x, s, weight, bias require gradients.
Run run(bool fused, const Shape& shape, bool training, bool affine, uint64_t seed,
        std::array<bool, 4> need = {true, true, true, true}) {
  Tensor x = rand_tensor(shape, seed).detach().set_requires_grad(need[0]);
  Tensor g = rand_tensor(shape, seed + 1).detach();
  Tensor s = add(mul(rand_tensor({shape[1]}, seed + 2).detach(), 0.7f), 1.1f).set_requires_grad(need[1]);
  Tensor w = affine ? rand_tensor({shape[1]}, seed + 3).detach().set_requires_grad(need[2]) : Tensor();
  Tensor b = affine ? rand_tensor({shape[1]}, seed + 4).detach().set_requires_grad(need[3]) : Tensor();
  Run r;
  r.rm = mul(rand_tensor({shape[1]}, seed + 5).detach(), 0.1f);
  r.rv = add(mul(rand_tensor({shape[1]}, seed + 6).detach(), 0.1f), 1.f);
  r.y = fused ? batch_norm_scaled(x, s, w, b, r.rm, r.rv, training, 0.1f, 1e-5f)
              : batch_norm(scale_channels(x, s, 1), w, b, r.rm, r.rv, training, 0.1f, 1e-5f);
  r.y.backward(g);
  r.gx = need[0] ? x.grad() : Tensor(), r.gs = need[1] ? s.grad() : Tensor();
  if (affine) r.gw = need[2] ? w.grad() : Tensor(), r.gb = need[3] ? b.grad() : Tensor();
  return r;
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
          CHECK(same_bits(a.y, b.y));
          CHECK(same_bits(a.rm, b.rm));
          CHECK(same_bits(a.rv, b.rv));
          CHECK(same_bits(a.gx, b.gx));
          CHECK(same_bits(a.gs, b.gs));
          CHECK(same_bits(a.gw, b.gw));
          CHECK(same_bits(a.gb, b.gb));
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
