#pragma once
// One output tile of the generic tiled GEMM (int_math.h) computed on the
// host: the phases of a CUDA block (load the operands' tiles, accumulate,
// store) as loops over the block's threads. The CPU executor (cpu_exec.h)
// runs its tiles on the OpenMP threads; the tests' host executor runs them
// in turn, poisoning the shared tile before each load.
#include <cstring>

#include "quant/integer/int_math.h"

namespace qat::quant::int_math {

// Every thread's accumulators of one tile.
template <class Stage>
struct HostTileAcc {
  typename Stage::Acc v[kGemmThreads][kMicro][kMicro];
};

// The output tile at (m0, n0). stale: fill the shared tile with a pattern
// before each load, so that a word read before it is written shows.
template <class A, class B, class Stage>
void host_gemm_tile(const A& a, const B& b, int64_t m, int64_t n, int64_t k, int64_t m0, int64_t n0,
                    const Stage& stage, GemmTile& tile, HostTileAcc<Stage>& acc, bool stale = false) {
  std::memset(&acc, 0, sizeof acc);
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    if (stale) std::memset(&tile, 0xA5, sizeof tile);
    for (int t = 0; t < kGemmThreads; ++t) gemm_load(a, b, m, n, k, m0, n0, k0, t, tile);
    for (int t = 0; t < kGemmThreads; ++t) gemm_accumulate(tile, t, acc.v[t]);
  }
  for (int t = 0; t < kGemmThreads; ++t) gemm_store(stage, m, n, m0, n0, t, acc.v[t]);
}

}  // namespace qat::quant::int_math
