// The per-element rules shared by the CPU ops and their CUDA twins
// (quant/sim/math.h, core/ops/math.h), one value at a time: what the CUDA
// kernels compute is what these CPU tests pin down (docs/conventions.md, convention 1).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/ops/math.h"
#include "quant/sim/math.h"

namespace {

namespace m = qat::quant::math;
namespace om = qat::op_math;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("math: round_half_even rounds ties to even and keeps NaN, infinities and the sign of zero", "[math][quant]") {
  CHECK(m::round_half_even(0.5f) == 0.f);
  CHECK(m::round_half_even(1.5f) == 2.f);
  CHECK(m::round_half_even(2.5f) == 2.f);
  CHECK(m::round_half_even(-1.5f) == -2.f);
  CHECK(m::round_half_even(std::nextafter(0.5f, 1.f)) == 1.f);
  CHECK(same_bits(m::round_half_even(-0.5f), -0.f));
  CHECK(m::round_half_even(8388609.f) == 8388609.f);  // 2^23 + 1: already an integer
  CHECK(std::isnan(m::round_half_even(kNaN)));
  CHECK(m::round_half_even(-kInf) == -kInf);
}

TEST_CASE("math: clamp_grid clips to [lo, hi] and lets NaN through", "[math][quant]") {
  CHECK(m::clamp_grid(-200.f, -128.f, 127.f) == -128.f);
  CHECK(m::clamp_grid(200.f, -128.f, 127.f) == 127.f);
  CHECK(m::clamp_grid(5.f, -128.f, 127.f) == 5.f);
  CHECK(std::isnan(m::clamp_grid(kNaN, -128.f, 127.f)));
  CHECK(m::clamp_grid(kInf, 0.f, 15.f) == 15.f);
}

TEST_CASE("math: fake-quant grid, dequantized value and STE mask of single elements", "[math][quant]") {
  // s = 0.5, inv = 2, z = 3, int8 [-128, 127]
  CHECK(m::fake_quant_grid(1.25f, 2.f, 3.f) == 5.f);   // 2.5 -> 2 (even), + 3
  CHECK(m::fake_quant_grid(1.75f, 2.f, 3.f) == 7.f);   // 3.5 -> 4, + 3
  CHECK(m::fake_quant_dequant(5.f, 0.5f, 3.f, -128.f, 127.f) == 1.f);
  CHECK(m::fake_quant_dequant(-197.f, 0.5f, 3.f, -128.f, 127.f) == -65.5f);  // clamped to qmin
  CHECK(m::fake_quant_dequant(400.f, 0.5f, 3.f, -128.f, 127.f) == 62.f);     // clamped to qmax
  CHECK(std::isnan(m::fake_quant_dequant(kNaN, 0.5f, 3.f, -128.f, 127.f)));
  // The mask looks at the grid value before the clamp, ends included.
  CHECK(m::ste_passes(-128.f, -128.f, 127.f));
  CHECK(m::ste_passes(127.f, -128.f, 127.f));
  CHECK_FALSE(m::ste_passes(-129.f, -128.f, 127.f));
  CHECK_FALSE(m::ste_passes(128.f, -128.f, 127.f));
  CHECK_FALSE(m::ste_passes(kNaN, -128.f, 127.f));
}

TEST_CASE("math: ste_grad is dy times the mask, so NaN and inf stay NaN where it stops", "[math][quant]") {
  CHECK(m::ste_grad(2.5f, 1) == 2.5f);
  CHECK(same_bits(m::ste_grad(-3.f, 0), -0.f));
  CHECK(same_bits(m::ste_grad(3.f, 0), 0.f));
  CHECK(std::isnan(m::ste_grad(kNaN, 0)));
  CHECK(std::isnan(m::ste_grad(kInf, 0)));
  CHECK(std::isnan(m::ste_grad(kNaN, 1)));
  CHECK(m::ste_grad(-kInf, 1) == -kInf);
}

TEST_CASE("math: relu_value and relu_grad of single elements", "[math]") {
  CHECK(om::relu_value(3.f) == 3.f);
  CHECK(om::relu_value(-3.f) == 0.f);
  CHECK(same_bits(om::relu_value(-0.f), 0.f));  // +0, not -0
  CHECK(same_bits(om::relu_value(kNaN), 0.f));  // NaN gives 0 (not PyTorch's NaN)
  CHECK(om::relu_value(kInf) == kInf);
  CHECK(om::relu_value(-kInf) == 0.f);
  CHECK(om::relu_value(1e-40f) == 1e-40f);  // subnormals pass
  CHECK(om::relu_grad(2.f, -7.f) == -7.f);
  CHECK(om::relu_grad(0.f, -7.f) == 0.f);
  CHECK(std::isnan(om::relu_grad(1.f, kNaN)));
  CHECK(om::relu_grad(0.f, kNaN) == 0.f);  // a select, not a product
}
