#pragma once
// The AMX tile operations the AMX GEMM uses (int8_gemm_amx.cpp), behind one
// interface with two implementations:
//  - HardwareTiles: the instructions themselves (ldtilecfg, tileloadd,
//    tilestored, tilezero, tdpbusd, tilerelease), written as inline assembly
//    with the tile numbers as template arguments, so that the file compiles
//    with any compiler that knows the mnemonics (GCC 12, Clang 14) and runs
//    only where amx_hardware_usable() says so;
//  - EmulatedTiles: an exact model of the same operations on eight 1 KiB
//    tile registers in memory, after Intel's pseudo-code (SDM vol. 2,
//    TDPBUSD: per row m and 32-bit column n of the destination,
//    C[m][n] += sum over the 4-byte groups k of A's row of the four products
//    u8 A[m][4k+i] x s8 B[k][4n+i], in int32 without saturation; the rows
//    and bytes beyond the configured shape are zeroed).
// The GEMM is one template over the two, so the tests run the whole AMX
// kernel, blocking and edge handling included, on every machine and on the
// hardware where it exists, and both must equal the scalar reference.
#include <cstdint>
#include <cstring>

namespace qat::quant::amx {

// The 64-byte operand of ldtilecfg, palette 1: per tile its rows (<= 16) and
// bytes per row (<= 64).
struct TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr int kTileRows = 16, kTileBytes = 64;

// A CPU with AMX-INT8 whose kernel granted this process the tile data state
// (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once).
bool amx_hardware_usable();

// (The tile numbers are immediates: "%c" prints a constant without its '$'.)
struct HardwareTiles {
  void configure(const TileConfig& c) { asm volatile("ldtilecfg (%0)" ::"r"(&c) : "memory"); }
  void release() { asm volatile("tilerelease" ::: "memory"); }
  template <int T>
  void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  void load(const void* base, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  void store(void* base, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  // C += A . B (u8 x s8 groups of four into int32)
  template <int C, int A, int B>
  void dpbusd() {
    asm volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};

class EmulatedTiles {
 public:
  void configure(const TileConfig& c);
  void release() { std::memset(tmm_, 0, sizeof(tmm_)); }
  template <int T>
  void zero() {
    std::memset(tmm_[T], 0, sizeof(tmm_[T]));
  }
  template <int T>
  void load(const void* base, int64_t stride) {
    load_tile(T, static_cast<const uint8_t*>(base), stride);
  }
  template <int T>
  void store(void* base, int64_t stride) const {
    store_tile(T, static_cast<uint8_t*>(base), stride);
  }
  template <int C, int A, int B>
  void dpbusd() {
    dpbusd_tiles(C, A, B);
  }

 private:
  void load_tile(int t, const uint8_t* base, int64_t stride);
  void store_tile(int t, uint8_t* base, int64_t stride) const;
  void dpbusd_tiles(int c, int a, int b);

  TileConfig cfg_{};
  alignas(64) uint8_t tmm_[8][kTileRows][kTileBytes] = {};
};

}  // namespace qat::quant::amx
