#pragma once
// The CUDA executor's launches on the host (quant/integer/cuda_exec.cuh), for
// the [math] tests of the code written over executors: every index of a
// per-index kernel, and the tiled GEMM's blocks phase by phase with
// __syncthreads() as the boundary between two loops over the block's threads.
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "quant/integer/int_math.h"

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
    struct ThreadAcc {
      typename Stage::Acc v[kMicro][kMicro];
    };
    std::vector<ThreadAcc> acc(kGemmThreads);
    GemmTile tile;
    for (int64_t m0 = 0; m0 < m; m0 += kTileM)
      for (int64_t n0 = 0; n0 < n; n0 += kTileN) {
        std::memset(acc.data(), 0, acc.size() * sizeof(ThreadAcc));
        for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
          std::memset(&tile, 0xA5, sizeof tile);  // stale shared memory: every word read must be written first
          for (int t = 0; t < kGemmThreads; ++t) gemm_load(a, b, m, n, k, m0, n0, k0, t, tile);
          for (int t = 0; t < kGemmThreads; ++t) gemm_accumulate(tile, t, acc[t].v);
        }
        for (int t = 0; t < kGemmThreads; ++t) gemm_store(stage, m, n, m0, n0, t, acc[t].v);
      }
  }
};

}  // namespace qat::testing
