#pragma once
// The CUDA executor of the code written over executors (int_forward.h,
// quant/int8_training/int8_device.h): one grid-stride kernel for the per-index bodies,
// and the tiled DP4A GEMM of int_math.h (Note [device int8 GEMM]) whose
// phases the host tests run thread after thread. Included by .cu files only.
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/error.h"
#include "core/tensor.h"
#include "quant/integer/int_math.h"

namespace qat::quant::cuda_exec {

template <class Body>
__global__ void each_kernel(Body body, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) body(i);
}

template <class A, class B, class Stage>
__global__ void __launch_bounds__(int_math::kGemmThreads)
    gemm_kernel(A a, B b, int64_t m, int64_t n, int64_t k, Stage stage) {
  __shared__ int_math::GemmTile tile;
  typename Stage::Acc acc[int_math::kMicro][int_math::kMicro] = {};
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * int_math::kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * int_math::kTileN;
  const int t = static_cast<int>(threadIdx.x);
  for (int64_t k0 = 0; k0 < k; k0 += int_math::kTileK) {
    int_math::gemm_load(a, b, m, n, k, m0, n0, k0, t, tile);
    __syncthreads();
    int_math::gemm_accumulate(tile, t, acc);
    __syncthreads();
  }
  int_math::gemm_store(stage, m, n, m0, n0, t, acc);
}

struct CudaExec {
  static constexpr Device device = Device::cuda;
  template <class T>
  static T* ptr(const Tensor& t) {
    return t.device_data<T>();
  }
  template <class Body>
  void each(int64_t n, const Body& body) {
    if (n == 0) return;
    each_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(body, n);
    QAT_CUDA_CHECK_LAUNCH(each_kernel);
  }
  // (m x k) . (n x k)^T into the stage
  template <class A, class B, class Stage>
  void gemm(const A& a, const B& b, int64_t m, int64_t n, int64_t k, const Stage& stage) {
    if (m == 0 || n == 0) return;
    const int64_t tiles_m = (m + int_math::kTileM - 1) / int_math::kTileM;
    const int64_t tiles_n = (n + int_math::kTileN - 1) / int_math::kTileN;
    // CUDA's grid limits: x up to 2^31 - 1 blocks, y up to 65535.
    QAT_CHECK(tiles_m <= INT32_MAX && tiles_n <= 65535, "int8 GEMM on cuda: ", m, " x ", n,
              " outputs need a grid of ", tiles_m, " x ", tiles_n, " blocks of ", int_math::kTileM, " x ",
              int_math::kTileN, "; CUDA allows at most 2147483647 x 65535");
    const dim3 grid(static_cast<unsigned>(tiles_m), static_cast<unsigned>(tiles_n));
    gemm_kernel<<<grid, int_math::kGemmThreads>>>(a, b, m, n, k, stage);
    QAT_CUDA_CHECK_LAUNCH(gemm_kernel);
  }
};

}  // namespace qat::quant::cuda_exec
