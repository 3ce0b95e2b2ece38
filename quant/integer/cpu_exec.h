#pragma once
// The CPU executor of the integer model (Note [integer ops over executors],
// int_forward.h): per-index bodies on the OpenMP threads, the generic tiled
// GEMM with a block of outputs per thread, and the ops' tuned CPU kernels
// (IntOpDef::cpu_kernel: packed weights on AMX / VNNI / AVX2, the pools, the
// input quantization) where an op has one.
#include <vector>

#include "core/tensor.h"
#include "quant/integer/host_gemm_tile.h"
#include "quant/integer/int8_gemm.h"
#include "quant/integer/int_forward.h"
#include "quant/integer/int_math.h"

namespace qat::quant {

struct CpuExec {
  GemmKernel kernel = best_gemm_kernel();  // the tuned GEMM kernels' instruction set

  static constexpr Device device = Device::cpu;
  template <class T>
  static T* ptr(const Tensor& t) {
    return t.data<T>();
  }
  template <class Body>
  void each(int64_t n, const Body& body) {
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 15))
    for (int64_t i = 0; i < n; ++i) body(i);
  }
  // The generic GEMM (int_math.h's tiles), its output tiles on the threads.
  // Only ops without a tuned kernel reach it.
  template <class A, class B, class Stage>
  void gemm(const A& a, const B& b, int64_t m, int64_t n, int64_t k, const Stage& stage) {
    using namespace int_math;
    const int64_t tiles_m = (m + kTileM - 1) / kTileM, tiles_n = (n + kTileN - 1) / kTileN;
#pragma omp parallel
    {
      std::vector<HostTileAcc<Stage>> acc(1);  // (on the heap: a tile's accumulators are large)
      GemmTile tile;
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tiles_m * tiles_n; ++t)
        host_gemm_tile(a, b, m, n, k, (t / tiles_n) * kTileM, (t % tiles_n) * kTileN, stage, tile, acc[0]);
    }
  }
};

// The add on the vector lanes (Note [the add in doubles]), in runs on the threads.
Tensor integer_add_lanes(const Tensor& a, const Tensor& b, const AddRequant& r);
inline Tensor integer_add(CpuExec&, const Tensor& a, const Tensor& b, const AddRequant& r) {
  return integer_add_lanes(a, b, r);
}

// The op's tuned CPU kernel, when it has one.
inline Tensor tuned_kernel(CpuExec& ex, const IntLayer& l, const Tensor& x) {
  const IntOpDef& def = int_op_def(l.op);
  return def.cpu_kernel ? def.cpu_kernel(l, x, ex.kernel) : Tensor();
}

}  // namespace qat::quant
