#pragma once
// The CUDA executor's launches on the host (quant/integer/cuda_exec.cuh), for
// the [math] tests of the code written over executors: every index of a
// per-index kernel, and the tiled GEMM's blocks phase by phase with
// __syncthreads() as the boundary between two loops over the block's threads.
#include <vector>

#include "core/tensor.h"
#include "quant/integer/host_gemm_tile.h"

namespace qat::testing {

struct HostExec {
  static constexpr Device device = Device::cpu;
  template <class T>
  static T* ptr(const Tensor& t) {
    return t.data<T>();
  }
  template <class Body>
  void each(int64_t n, const Body& body) {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
  template <class A, class B, class Stage>
  void gemm(const A& a, const B& b, int64_t m, int64_t n, int64_t k, const Stage& stage) {
    using namespace quant::int_math;
    std::vector<HostTileAcc<Stage>> acc(1);
    GemmTile tile;
    for (int64_t m0 = 0; m0 < m; m0 += kTileM)
      for (int64_t n0 = 0; n0 < n; n0 += kTileN)
        host_gemm_tile(a, b, m, n, k, m0, n0, stage, tile, acc[0], /*stale=*/true);  // every word read must be written first
  }
};

}  // namespace qat::testing
