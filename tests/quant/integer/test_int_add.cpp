// The integer add (Note [integer add]) against an exact reference and
// against the float fake-quant model's add, on every pair of input values.
#include <cmath>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "quant/integer/int_add.h"
#include "quant/integer/integer_model.h"
#include "quant/sim/math.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

ActQuant grid(float scale, int32_t zero, bool is_signed = false, float frac = 0.f, int bits = 8) {
  ActQuant q;
  q.scale = scale, q.zero_point = zero, q.is_signed = is_signed, q.zero_frac = frac, q.bits = bits;
  return q;
}

struct AddCase {
  std::string name;
  ActQuant a, b, y;
  bool relu = false;
};

std::vector<AddCase> cases() {
  return {
      {"equal grids", grid(0.05f, 10), grid(0.05f, 200), grid(0.05f, 30)},
      {"b at half a's scale: exact ties", grid(0.1f, 0), grid(0.05f, 128), grid(0.1f, 64)},
      {"three different grids", grid(0.0213f, 3), grid(0.0377f, 140), grid(0.0411f, 97)},
      {"with ReLU", grid(0.0213f, 3), grid(0.0377f, 140), grid(0.0411f, 97), true},
      {"signed inputs, unsigned output", grid(0.013f, 0, true), grid(0.029f, -5, true), grid(0.031f, 12)},
      {"signed output, saturating", grid(0.09f, 7), grid(0.11f, 250), grid(0.004f, 0, true)},
      {"very different scales (2^20)", grid(0.5f, 4), grid(0.5f / 1048576.f, 100), grid(0.37f, 20)},
      {"a input 2^8 times the output step", grid(2.56f, 128), grid(0.01f, 9), grid(0.01f, 128)},
      {"LSQ+ fractional zero points", grid(0.021f, 17, false, 0.37f), grid(0.043f, 60, false, -0.5f),
       grid(0.05f, 3, false, 0.125f)},
      {"4-bit output", grid(0.02f, 0), grid(0.03f, 11), grid(0.2f, 2, false, 0.f, 4)},
  };
}

// Every stored value of a grid.
std::vector<int32_t> stored_values(const ActQuant& q) {
  std::vector<int32_t> v;
  for (int32_t s = q.qmin() + q.offset(); s <= q.qmax() + q.offset(); ++s) v.push_back(s);
  return v;
}

// The exact R + f_y of the note, and how far the integer add's constants may
// move it: sum of |error of each rounded constant| times what multiplies it.
struct Exact {
  long double value, slack;
  long double terms;  // |ra (q_a - z_a)| + |rb (q_b - z_b)|
  long double to_tie() const { return std::abs(value - std::floor(value) - 0.5L); }
};
Exact exact(const AddCase& c, const AddRequant& r, int32_t a, int32_t b) {
  const long double ra = static_cast<long double>(c.a.scale) / c.y.scale;
  const long double rb = static_cast<long double>(c.b.scale) / c.y.scale;
  const long double unit = std::ldexp(1.0L, r.t);
  const int32_t da = a - c.a.zero_point - c.a.offset(), db = b - c.b.zero_point - c.b.offset();
  const long double v = ra * (da - static_cast<long double>(c.a.zero_frac)) +
                        rb * (db - static_cast<long double>(c.b.zero_frac)) + c.y.zero_frac;
  const long double e = (c.y.zero_frac - c.a.zero_frac * ra - c.b.zero_frac * rb) * unit;
  const long double slack =
      (std::abs(da) * std::abs(r.ma - ra * unit) + std::abs(db) * std::abs(r.mb - rb * unit) + std::abs(r.extra - e)) /
      unit;
  return {v, slack, std::abs(ra * da) + std::abs(rb * db)};
}

int32_t clamp_stored(long double q, const AddCase& c) {
  int32_t lo = c.y.qmin() + c.y.offset();
  const int32_t hi = c.y.qmax() + c.y.offset(), z = c.y.zero_point + c.y.offset();
  if (c.relu) lo = std::max(lo, z);
  const long double s = q + z;
  return static_cast<int32_t>(s < lo ? lo : (s > hi ? hi : s));
}

// The float model: each input dequantized as fake quantization leaves it,
// the float sum, then the output quantizer (nearbyint(x * (1 / s)) + z),
// the ReLU before it where the case has one. (Grids without fractions.)
int32_t float_model(const AddCase& c, int32_t a, int32_t b) {
  const float fa = static_cast<float>(a - c.a.offset() - c.a.zero_point) * c.a.scale;
  const float fb = static_cast<float>(b - c.b.offset() - c.b.zero_point) * c.b.scale;
  float x = fa + fb;
  if (c.relu) x = std::max(x, 0.f);
  const float q = math::fake_quant_grid(x, 1.f / c.y.scale, 0.f);
  return clamp_stored(q, c);
}

}  // namespace

TEST_CASE("integer add: the exact sum rounded half to even, but within its constants' rounding of a tie",
          "[quant][integer][add]") {
  for (const AddCase& c : cases()) {
    SECTION(c.name) {
      const AddRequant r = make_add_requant(c.a, c.b, c.y, c.relu, "test add");
      REQUIRE(std::max(r.ma, r.mb) >= (int64_t{1} << 30));
      REQUIRE(std::max(r.ma, r.mb) <= (int64_t{1} << 31));
      int64_t pairs = 0, off_by_one = 0;
      const int32_t lo = std::max(c.y.qmin() + c.y.offset(), c.relu ? c.y.zero_point + c.y.offset() : 0);
      bool low = false, high = false;
      for (const int32_t a : stored_values(c.a))
        for (const int32_t b : stored_values(c.b)) {
          const Exact e = exact(c, r, a, b);
          const int32_t want = clamp_stored(std::nearbyintl(e.value), c);
          const int32_t got = add_requant_value(a, b, r);
          ++pairs;
          low |= got == lo;
          high |= got == c.y.qmax() + c.y.offset();
          if (got == want) continue;
          // Only where the constants' rounding reaches a rounding boundary.
          INFO("a " << a << " b " << b << " exact " << static_cast<double>(e.value) << " got " << got << " want "
                    << want);
          REQUIRE(std::abs(got - want) == 1);
          REQUIRE(e.to_tie() <= e.slack);
          ++off_by_one;
        }
      INFO(off_by_one << " of " << pairs << " pairs off by one");
      CHECK(off_by_one == 0);  // (none in these cases; the rule above allows them)
      if (c.name == "signed output, saturating") CHECK((low && high));
    }
  }
}

TEST_CASE("integer add: on equal or power-of-two grids it equals the float model, ties included",
          "[quant][integer][add]") {
  // The float model is exact on these grids (every product and sum fits a
  // float), so it rounds the exact ties half to even, as the add does.
  const std::vector<AddCase> exact_cases = {
      cases()[0],
      {"power-of-two scales, ties", grid(0.0625f, 3), grid(0.03125f, 130), grid(0.0625f, 64)},
      {"power-of-two scales, ReLU", grid(0.125f, 0, true), grid(0.0078125f, 0, true), grid(0.03125f, 0), true},
  };
  for (const AddCase& c : exact_cases) {
    SECTION(c.name) {
      const AddRequant r = make_add_requant(c.a, c.b, c.y, c.relu, "test add");
      REQUIRE(r.extra == 0);
      for (const int32_t a : stored_values(c.a))
        for (const int32_t b : stored_values(c.b)) {
          INFO("a " << a << " b " << b);
          REQUIRE(add_requant_value(a, b, r) == float_model(c, a, b));
        }
    }
  }
}

TEST_CASE("integer add against the float fake-quant model: one step apart at most, and only near a tie",
          "[quant][integer][add]") {
  // The float model rounds each product, the sum and the product by 1 / s_y
  // (2^-24 relative each): it may land on the other side of a tie than the
  // exact R when R is within about 2^-22 (terms + |R|) of it.
  for (const AddCase& c : cases()) {
    if (c.a.zero_frac != 0.f || c.b.zero_frac != 0.f || c.y.zero_frac != 0.f) continue;
    SECTION(c.name) {
      const AddRequant r = make_add_requant(c.a, c.b, c.y, c.relu, "test add");
      for (const int32_t a : stored_values(c.a))
        for (const int32_t b : stored_values(c.b)) {
          const int32_t got = add_requant_value(a, b, r), fm = float_model(c, a, b);
          if (got == fm) continue;
          const Exact e = exact(c, r, a, b);
          INFO("a " << a << " b " << b << " exact " << static_cast<double>(e.value) << " add " << got << " float model "
                    << fm);
          REQUIRE(std::abs(got - fm) == 1);
          REQUIRE(e.to_tie() <= std::ldexp(e.terms + std::abs(e.value), -22) + e.slack);
        }
      // (measured: 0 in most cases; 2283 of 65536 where b's scale is half of a's and the
      // output's is a's, 0.1: every odd q_b - z_b is an exact tie the float model's
      // 1 / 0.1f decides; 44 and 142 in the saturating and 4-bit cases)
    }
  }
}

TEST_CASE("integer add on the CPU executor: every element by the rule, shapes and grids checked",
          "[quant][integer][add]") {
  const AddCase c = cases()[2];
  const AddRequant r = make_add_requant(c.a, c.b, c.y, false, "layer1.0.add");
  Generator g(5);
  const int64_t n = 2 * 5 * 7 * 9;
  Tensor a = Tensor::empty({2, 5, 7, 9}, DType::u8), b = Tensor::empty({2, 5, 7, 9}, DType::u8);
  uint8_t *va = a.data<uint8_t>(), *vb = b.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    va[i] = static_cast<uint8_t>(g.below(256)), vb[i] = static_cast<uint8_t>(g.below(256));
  const Tensor y = integer_add_cpu(a, b, r, "layer1.0.add");
  REQUIRE(y.sizes() == a.sizes());
  for (int64_t i = 0; i < n; ++i) REQUIRE(y.data<uint8_t>()[i] == add_requant_value(va[i], vb[i], r));
  REQUIRE_THROWS_WITH(integer_add_cpu(a, b.view({2, 5, 9, 7}), r, "layer1.0.add"),
                      Contains("layer1.0.add") && Contains("[2, 5, 7, 9]") && Contains("[2, 5, 9, 7]"));
  REQUIRE_THROWS_WITH(make_add_requant(grid(4096.f, 0), grid(0.1f, 0), grid(1e-6f, 0), false, "layer2.1.add"),
                      Contains("layer2.1.add") && Contains("no fixed-point multiplier fits"));
  REQUIRE_THROWS_WITH(make_add_requant(grid(0.1f, 0), grid(-0.1f, 0), grid(0.1f, 0), false, "layer2.1.add"),
                      Contains("layer2.1.add") && Contains("valid grids"));
}

TEST_CASE("integer add on vector lanes: the scalar body's value on every pair of inputs, at every offset and tail",
          "[quant][integer][add]") {
  std::vector<AddCase> all = cases();
  // t = 62 (ratios about 2^-31): not exact in double, so the scalar body runs.
  all.push_back({"t = 62: the scalar fallback", grid(1e-9f, 0), grid(1e-9f, 3), grid(2.0f, 5, false, 0.3f)});
  // Near the float lanes' limit (S just under 2^15): their check's margin at its widest.
  all.push_back({"ratios 60 and 3.7: floats at their limit", grid(0.6f, 128), grid(0.037f, 200), grid(0.01f, 40)});
  for (const AddCase& c : all) {
    SECTION(c.name) {
      const AddRequant r = make_add_requant(c.a, c.b, c.y, c.relu, "test add");
      REQUIRE(add_exact_in_double(r) == !c.name.starts_with("t = 62"));
      // (Note [the add in floats]: ratios summing to more than about 60 stay on doubles)
      const bool floats_expected = !c.name.starts_with("t = 62") && !c.name.starts_with("a input 2^8");
      REQUIRE(add_in_floats(r) == floats_expected);
      std::vector<uint8_t> a, b, want;
      for (int32_t x = 0; x < 256; ++x)
        for (int32_t z = 0; z < 256; ++z) {
          a.push_back(static_cast<uint8_t>(x)), b.push_back(static_cast<uint8_t>(z));
          want.push_back(add_requant_value(x, z, r));
        }
      const int64_t n = static_cast<int64_t>(a.size());
      for (const RowLanes lanes : {RowLanes::scalar, RowLanes::avx2, RowLanes::avx512}) {
        if (!row_lanes_run_here(lanes)) {
          WARN("this CPU lacks lanes " << static_cast<int>(lanes) << ": not tested here");
          continue;
        }
        for (const bool floats : {false, true})
          for (const int64_t skip : {0, 1, 7}) {  // misaligned starts and a tail of every length below 16
            std::vector<uint8_t> y(a.size(), 0xAB);
            add_requant_run(a.data() + skip, b.data() + skip, y.data() + skip, n - skip - skip % 5, r, lanes, floats);
            for (int64_t i = 0; i < n; ++i) {
              INFO("lanes " << static_cast<int>(lanes) << " floats " << floats << " a " << int{a[i]} << " b "
                            << int{b[i]} << " skip " << skip);
              REQUIRE(y[i] == (i < skip || i >= n - skip % 5 ? 0xAB : want[i]));
            }
          }
      }
    }
  }
}

TEST_CASE("integer add on the CPU executor: a tensor large enough for the threads", "[quant][integer][add]") {
  const AddCase c = cases()[8];  // LSQ+ grids: a nonzero E
  const AddRequant r = make_add_requant(c.a, c.b, c.y, false, "layer1.0.add");
  Generator g(9);
  Tensor a = Tensor::empty({4, 16, 16, 67}, DType::u8), b = Tensor::empty({4, 16, 16, 67}, DType::u8);
  uint8_t *va = a.data<uint8_t>(), *vb = b.data<uint8_t>();
  for (int64_t i = 0; i < a.numel(); ++i)
    va[i] = static_cast<uint8_t>(g.below(256)), vb[i] = static_cast<uint8_t>(g.below(256));
  const Tensor y = integer_add_cpu(a, b, r, "layer1.0.add");
  for (int64_t i = 0; i < a.numel(); ++i) REQUIRE(y.data<uint8_t>()[i] == add_requant_value(va[i], vb[i], r));
}

TEST_CASE("integer add: the float lanes take only constants their error bound covers", "[quant][integer][add]") {
  const AddRequant r = make_add_requant(grid(0.05f, 10), grid(0.05f, 200), grid(0.05f, 30), false, "layer1.0.add");
  REQUIRE(add_in_floats(r));
  AddRequant negative = r;
  negative.mb = -negative.mb;
  CHECK_FALSE(add_in_floats(negative));
  AddRequant inverted = r;
  inverted.lo = 200, inverted.hi = 100;
  CHECK_FALSE(add_in_floats(inverted));
  AddRequant wide = r;
  wide.hi = 300;
  CHECK_FALSE(add_in_floats(wide));
}
