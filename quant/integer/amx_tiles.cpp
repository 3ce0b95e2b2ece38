#include "quant/integer/amx_tiles.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"
#include "core/cpu_features.h"

namespace qat::quant::amx {

bool amx_hardware_usable() {
  static const bool yes = [] {
    if (!cpu_has_amx_int8()) return false;
#ifdef __linux__
    // Linux 5.16+: tile data is off for a process until it asks for it.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return yes;
}

// What the hardware refuses (#UD / #GP) is refused here too, so that a kernel
// that configures shapes the hardware would reject fails its tests.
void EmulatedTiles::configure(const TileConfig& c) {
  QAT_CHECK(c.palette_id == 1 && c.start_row == 0, "AMX emulation: palette ", int{c.palette_id}, ", start row ",
            int{c.start_row}, " (only palette 1 from row 0)");
  for (int t = 0; t < 16; ++t)
    QAT_CHECK(c.rows[t] <= kTileRows && c.colsb[t] <= kTileBytes && c.colsb[t] % 4 == 0 &&
                  (c.rows[t] == 0) == (c.colsb[t] == 0) && (t < 8 || c.rows[t] == 0),
              "AMX emulation: tile ", t, " configured ", int{c.rows[t]}, " rows x ", c.colsb[t], " bytes");
  for (uint8_t r : c.reserved) QAT_CHECK(r == 0, "AMX emulation: reserved bytes of the tile configuration must be 0");
  cfg_ = c;
  std::memset(tmm_, 0, sizeof(tmm_));
}

void EmulatedTiles::load_tile(int t, const uint8_t* base, int64_t stride) {
  std::memset(tmm_[t], 0, sizeof(tmm_[t]));
  for (int r = 0; r < cfg_.rows[t]; ++r) std::memcpy(tmm_[t][r], base + r * stride, cfg_.colsb[t]);
}

void EmulatedTiles::store_tile(int t, uint8_t* base, int64_t stride) const {
  for (int r = 0; r < cfg_.rows[t]; ++r) std::memcpy(base + r * stride, tmm_[t][r], cfg_.colsb[t]);
}

void EmulatedTiles::dpbusd_tiles(int c, int a, int b) {
  const int rows = cfg_.rows[c], cols = cfg_.colsb[c] / 4, groups = cfg_.colsb[a] / 4;
  QAT_CHECK(rows > 0 && groups > 0 && c != a && c != b && a != b && cfg_.rows[a] == rows && cfg_.rows[b] == groups && cfg_.colsb[b] == cfg_.colsb[c],
            "AMX emulation: tdpbusd on tiles ", c, " (", rows, "x", cfg_.colsb[c], "), ", a, " (", int{cfg_.rows[a]},
            "x", cfg_.colsb[a], "), ", b, " (", int{cfg_.rows[b]}, "x", cfg_.colsb[b], ")");
  for (int m = 0; m < rows; ++m) {
    uint32_t acc[kTileBytes / 4];  // unsigned: int32 sums wrap, as the hardware's do
    std::memcpy(acc, tmm_[c][m], sizeof(acc));
    const uint8_t* arow = tmm_[a][m];
    for (int k = 0; k < groups; ++k) {
      const auto* brow = reinterpret_cast<const int8_t*>(tmm_[b][k]);
      for (int n = 0; n < cols; ++n) {
        int32_t dot = 0;
        for (int i = 0; i < 4; ++i) dot += int32_t{arow[4 * k + i]} * int32_t{brow[4 * n + i]};
        acc[n] += static_cast<uint32_t>(dot);
      }
    }
    for (int n = cols; n < kTileBytes / 4; ++n) acc[n] = 0;
    std::memcpy(tmm_[c][m], acc, sizeof(acc));
  }
}

}  // namespace qat::quant::amx
