// The integer concat (Note [integer concat]): each branch requantized onto
// the output grid against a long-double reference, a branch on that grid
// copied; a graph with a concat prepared, frozen and exported.
#include "tests/host_exec.h"
#include "tests/graph_checks.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>

#include "quant/convert/compare_layers.h"
#include "quant/convert/freeze.h"
#include "quant/integer/int_forward.h"
#include "quant/integer/integer_model.h"
#include "quant/sim/prepare.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

namespace {

// Stored values (q + offset) uniformly over grid g's range.
Tensor random_codes(const Shape& shape, const ActQuant& g, Generator& gen) {
  Tensor t = Tensor::empty(shape, DType::u8);
  const Tensor r = Tensor::uniform(shape, gen, 0.f, 1.f);
  const int32_t lo = g.qmin() + g.offset(), span = g.qmax() - g.qmin() + 1;
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<uint8_t>()[i] = static_cast<uint8_t>(lo + std::min<int32_t>(span - 1, static_cast<int32_t>(r.data<float>()[i] * span)));
  return t;
}

}  // namespace

TEST_CASE("integer concat: each branch onto the output grid with one rounding, a branch on it copied",
          "[quant][integer]") {
  const ActQuant out{0.05f, 128, 0.f, 8, false};
  IntLayer l;
  l.op = IntOp::concat;
  l.name = "cat";
  l.out = out;
  l.concat_in = {ActQuant{0.0173f, 10, 0.f, 8, false},   // a finer grid
                 ActQuant{1.3f, 0, 0.f, 8, true},        // 26 times coarser, signed: saturates both ways
                 out,                                    // the output's own grid: copied
                 ActQuant{0.061f, 3, 0.25f, 4, false}};  // 4 bits, an LSQ+ fractional zero point
  l.finalize();
  const std::vector<int64_t> channels = {3, 2, 4, 1};
  Generator gen(11);
  std::vector<Tensor> xs;
  for (size_t k = 0; k < channels.size(); ++k) xs.push_back(random_codes({2, 3, 5, channels[k]}, l.concat_in[k], gen));
  const Tensor y = IntegerModel{}.run_layer(l, xs[0], {&xs[1], &xs[2], &xs[3]});
  REQUIRE(y.sizes() == Shape({2, 3, 5, 10}));
  int64_t off = 0, saturated = 0, near_ties = 0;
  for (size_t k = 0; k < channels.size(); ++k) {
    const ActQuant& g = l.concat_in[k];
    for (int64_t p = 0; p < 30; ++p)
      for (int64_t c = 0; c < channels[k]; ++c) {
        const int32_t stored = xs[k].data<uint8_t>()[p * channels[k] + c];
        const long double t = static_cast<long double>(g.scale) * (stored - g.offset() - g.zero_point - g.zero_frac) /
                                  out.scale + out.zero_frac;
        const long double r = std::nearbyint(t) + out.zero_point;
        const int32_t want = static_cast<int32_t>(std::clamp<long double>(r, out.qmin(), out.qmax())) + out.offset();
        const int32_t got = y.data<uint8_t>()[p * 10 + off + c];
        saturated += r < out.qmin() || r > out.qmax();
        const bool tie = std::abs(std::abs(t - std::floor(t)) - 0.5L) < 1e-6L;
        near_ties += tie;
        INFO("branch " << k << " value " << stored << " -> " << static_cast<double>(t));
        if (k == 2) REQUIRE(got == stored);  // the copy
        else if (!tie) REQUIRE(got == want);
      }
    off += channels[k];
  }
  CHECK(saturated > 0);
  CHECK(near_ties == 0);  // (no value of these grids lands within 1e-6 of a tie)
  SECTION("inputs that do not fit are refused naming the layer") {
    const Tensor small = random_codes({2, 3, 4, 2}, l.concat_in[1], gen);
    REQUIRE_THROWS_WITH(IntegerModel{}.run_layer(l, xs[0], {&small, &xs[2], &xs[3]}),
                        Contains("'cat' (concat)") && Contains("input 1"));
    REQUIRE_THROWS_WITH(IntegerModel{}.run_layer(l, xs[0], {&xs[1]}), Contains("'cat' (concat): joins 4 inputs, got 2"));
  }
}

// prepare: the concat's own quantizer on "cat_quant"; freeze: one concat
// layer reading the three branches' grids; every integer layer against its
// node's value in the fake-quant graph: exact, the average pool included.
TEST_CASE("a graph with a concat prepares, freezes and agrees with its fake-quant model", "[quant][freeze][graph]") {
  ModulePtr m = testing::concat_model();
  const IntegerModel im = freeze(*m);
  const IntLayer* cat = nullptr;
  for (const IntLayer& l : im.layers)
    if (l.op == IntOp::concat) cat = &l;
  REQUIRE(cat != nullptr);
  REQUIRE(cat->inputs.size() == 3);
  for (size_t k = 0; k < 3; ++k) REQUIRE(cat->concat_in[k] == im.layers[cat->inputs[k]].out);
  // the max pool keeps the first conv's grid
  REQUIRE(cat->concat_in[2] == cat->concat_in[0]);
  REQUIRE(!(cat->concat_in[0] == cat->out));
  Generator gen(3);
  const Tensor x = Tensor::randn({4, 3, 16, 16}, gen);
  const std::vector<LayerDiff> diffs = compare_layers(*m, im, x);
  REQUIRE(diffs.size() == im.layers.size());
  testing::require_graph_layers_exact(diffs);
  // The executors' generic code (the CUDA twin's) on the host: the same logits.
  testing::HostExec ex;
  REQUIRE(testing::same_bits(run_int_model(ex, im, model_constants(im, Device::cpu), x.contiguous()), im.forward(x)));
  SECTION("without the backend's concat pattern the concat stays float, is named, and freeze refuses it") {
    ModulePtr g = testing::concat_model(false);
    REQUIRE_THROWS_WITH(freeze(*g), Contains("'cat'") && Contains("concatenates in float"));
  }
}
