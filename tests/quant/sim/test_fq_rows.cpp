// The fused weight pass's row kernels (quant/sim/fq_rows.h): every kernel
// this CPU runs gives, bit for bit, the element-by-element rule of
// quant/sim/math.h for the values and the clipped-STE mask bits (0 past the
// row's end), with plain and with streamed stores.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/enum_names.h"
#include "core/generator.h"
#include "quant/sim/fq_rows.h"
#include "quant/sim/math.h"

using namespace qat;
using namespace qat::quant;

namespace {

std::vector<FqRowsKernel> kernels_here() {
  std::vector<FqRowsKernel> ks;
  for (const auto& [k, name] : enum_names(FqRowsKernel{}))
    if (fq_rows_kernel_runs_here(k)) ks.push_back(k);
  return ks;
}

// Normal values around the grid, with NaN, infinities, signed zeros, exact
// ties, the grid's ends and just beyond them, and huge values spliced in.
std::vector<float> row_values(int64_t n, const FqRowArgs& a, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  const float span = (a.qmax - a.qmin) * a.s;
  for (float& x : v) x = 0.6f * span * gen.normal();
  const float lo = (a.qmin - a.z) * a.s, hi = (a.qmax - a.z) * a.s;
  const float special[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           -0.0f,
                           0.0f,
                           2.5f * a.s,
                           -3.5f * a.s,
                           0.5f * a.s,
                           lo,
                           hi,
                           lo - 0.5f * a.s,
                           hi + 0.5f * a.s,
                           lo - 0.51f * a.s,
                           hi + 0.51f * a.s,
                           1e30f,
                           -1e30f};
  for (size_t i = 0; i < std::size(special) && 5 * i + seed % 5 < v.size(); ++i) v[5 * i + seed % 5] = special[i];
  return v;
}

struct Expected {
  std::vector<float> y;
  std::vector<uint16_t> bits;
};

Expected element_rule(const std::vector<float>& x, const FqRowArgs& a) {
  const auto n = static_cast<int64_t>(x.size());
  Expected e{std::vector<float>(x.size()), std::vector<uint16_t>(static_cast<size_t>((n + 15) / 16))};
  for (int64_t i = 0; i < n; ++i) {
    const float q = math::fake_quant_grid(x[i], a.inv, a.z);
    e.y[i] = math::fake_quant_dequant(q, a.s, a.z, a.qmin, a.qmax);
    if (math::ste_passes(q, a.qmin, a.qmax)) e.bits[i / 16] |= static_cast<uint16_t>(1u << (i % 16));
  }
  return e;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }

// y storage aligned to 64 bytes (the streamed kernels' requirement).
struct AlignedRow {
  std::vector<float> storage;
  float* y;
  explicit AlignedRow(int64_t n) : storage(static_cast<size_t>(n + 16), -7.f) {
    auto p = reinterpret_cast<uintptr_t>(storage.data());
    y = storage.data() + ((64 - p % 64) % 64) / sizeof(float);
  }
};

}  // namespace

TEST_CASE("every fake-quant row kernel equals the element rule, values and mask bits", "[quant][fq_rows]") {
  // 8-bit signed, 8-bit unsigned with an offset zero point, 4-bit with z != 0.
  const FqRowArgs grids[] = {{0.02f, 1.0f / 0.02f, 0.f, -128.f, 127.f},
                             {0.05f, 1.0f / 0.05f, 117.f, 0.f, 255.f},
                             {0.3f, 1.0f / 0.3f, -2.f, -8.f, 7.f}};
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 49; ++n) lengths.push_back(n);
  for (int64_t n : {64, 1000, 16384 + 7, 16384 * 2}) lengths.push_back(n);
  for (const FqRowsKernel kernel : kernels_here()) {
    for (const FqRowArgs& a : grids)
      for (const int64_t n : lengths) {
        INFO(enum_name(kernel) << ", n = " << n << ", z = " << a.z << ", [" << a.qmin << ", " << a.qmax << "]");
        const std::vector<float> x = row_values(n, a, static_cast<uint64_t>(n) * 31 + static_cast<uint64_t>(a.z));
        const Expected e = element_rule(x, a);
        for (const bool stream : {false, true}) {
          if (stream && n % 16 != 0) continue;  // the streamed kernels' requirement
          INFO("stream " << stream);
          AlignedRow row(n);
          std::vector<uint16_t> bits(e.bits.size() + 1, 0xA5A5);
          fq_row_bits(kernel, stream, x.data(), row.y, n, a, bits.data());
          REQUIRE(same_bits(row.y, e.y.data(), n));
          REQUIRE(row.y[n] == -7.f);  // nothing written past the row
          for (size_t w = 0; w < e.bits.size(); ++w) {
            INFO("word " << w);
            REQUIRE(bits[w] == e.bits[w]);
          }
          REQUIRE(bits.back() == 0xA5A5);
        }
      }
  }
}

TEST_CASE("a fake-quant row kernel this CPU lacks is refused, naming it", "[quant][fq_rows]") {
  for (const auto& [k, name] : enum_names(FqRowsKernel{})) {
    if (fq_rows_kernel_runs_here(k)) continue;
    float x = 1.f, y = 0.f;
    uint16_t bits = 0;
    REQUIRE_THROWS_WITH(fq_row_bits(k, false, &x, &y, 1, {1.f, 1.f, 0.f, -128.f, 127.f}, &bits),
                        Catch::Contains(name));
  }
  REQUIRE(fq_rows_kernel_runs_here(FqRowsKernel::generic));
}
