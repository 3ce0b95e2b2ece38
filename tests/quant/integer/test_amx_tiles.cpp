// The AMX tile model (amx_tiles.h) on small partial shapes against sums
// written out here; the same sequence on the hardware where it exists.
#include "tests/test_util.h"

#include "quant/integer/amx_tiles.h"

using namespace qat::quant::amx;

namespace {

// C (3 rows x 5 int32) += A (3 x 8 u8) . B (2 groups x 5 columns x 4 s8),
// twice (accumulates), then stored over a canary-filled buffer.
template <class Tiles>
std::vector<int32_t> partial_product(Tiles& t, const uint8_t* a, const int8_t* b) {
  TileConfig cfg;
  cfg.rows[0] = 3, cfg.colsb[0] = 20;  // C
  cfg.rows[1] = 3, cfg.colsb[1] = 8;   // A: 2 groups of 4 bytes
  cfg.rows[2] = 2, cfg.colsb[2] = 20;  // B: one row per group
  t.configure(cfg);
  t.template zero<0>();
  t.template load<1>(a, 8);
  t.template load<2>(b, 20);
  t.template dpbusd<0, 1, 2>();
  t.template dpbusd<0, 1, 2>();
  std::vector<int32_t> c(4 * 6, 0x5a5a5a5a);
  t.template store<0>(c.data(), 6 * sizeof(int32_t));
  t.release();
  return c;
}

}  // namespace

TEST_CASE("emulated AMX tiles: tdpbusd on partial tiles equals the written-out sums", "[quant][amx]") {
  uint8_t a[3 * 8];
  int8_t b[2 * 20];
  for (int i = 0; i < 24; ++i) a[i] = static_cast<uint8_t>(i % 3 == 0 ? 255 : 7 * i);
  for (int i = 0; i < 40; ++i) b[i] = static_cast<int8_t>(i % 5 == 0 ? -128 : 13 * i - 200);
  std::vector<int32_t> want(4 * 6, 0x5a5a5a5a);
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 5; ++n) {
      int32_t s = 0;
      for (int k = 0; k < 2; ++k)
        for (int i = 0; i < 4; ++i) s += int32_t{a[m * 8 + 4 * k + i]} * int32_t{b[k * 20 + 4 * n + i]};
      want[m * 6 + n] = 2 * s;  // stored: 3 rows of 5; the rest of the buffer untouched
    }
  EmulatedTiles emu;
  REQUIRE(partial_product(emu, a, b) == want);
  if (amx_hardware_usable()) {
    HardwareTiles hw;
    REQUIRE(partial_product(hw, a, b) == want);
  } else {
    WARN("no AMX hardware here: the tile sequence ran on the emulation only");
  }
}

TEST_CASE("emulated AMX tiles refuse what the hardware refuses", "[quant][amx]") {
  EmulatedTiles t;
  TileConfig bad;
  bad.rows[0] = 17, bad.colsb[0] = 64;
  REQUIRE_THROWS_WITH(t.configure(bad), Catch::Matchers::Contains("tile 0 configured 17 rows"));
  TileConfig cfg;
  cfg.rows[0] = 2, cfg.colsb[0] = 16;
  cfg.rows[1] = 2, cfg.colsb[1] = 12;  // 3 groups of K
  cfg.rows[2] = 2, cfg.colsb[2] = 16;  // but only 2 rows of B
  t.configure(cfg);
  REQUIRE_THROWS_WITH((t.dpbusd<0, 1, 2>()), Catch::Matchers::Contains("tdpbusd on tiles 0"));
}
