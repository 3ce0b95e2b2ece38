// The kernels behind Tensor's device paths (core/tensor_cuda.h): one thread
// per element, grid-stride loops, the per-element rules of
// core/strided_layout.h and core/ops/math.h.
#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/error.h"
#include "core/ops/math.h"
#include "core/tensor_cuda.h"

namespace qat::tensor_cuda {

namespace {

template <class T>
__global__ void gather_strided_kernel(const T* __restrict__ src, StridedLayout layout, T* __restrict__ dst,
                                      int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) dst[i] = src[strided_offset(i, layout)];
}

// A strided view never holds one storage element twice (qat makes no
// expanded views), so the threads write distinct elements.
template <class T>
__global__ void scatter_strided_kernel(const T* __restrict__ src, T* __restrict__ dst, StridedLayout layout,
                                       int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) dst[strided_offset(i, layout)] = src[i];
}

__global__ void fill_kernel(float* base, StridedLayout layout, float value, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) base[strided_offset(i, layout)] = value;
}

__global__ void scale_kernel(float* base, StridedLayout layout, float s, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) {
    float& v = base[strided_offset(i, layout)];
    v = v * s;
  }
}

// dst and src may be one buffer (t.add_(t)): no __restrict__.
__global__ void add_scaled_kernel(float* dst, const float* src, float alpha, int64_t n) {
  QAT_GRID_STRIDE_LOOP(i, n) dst[i] = op_math::add_scaled(dst[i], alpha, src[i]);
}

void check_element_size(size_t elem_size, const char* op) {
  QAT_CHECK(elem_size == 1 || elem_size == 4, op, ": elements of ", elem_size, " bytes (expected 1 or 4)");
}

}  // namespace

void gather_strided(const void* src, const StridedLayout& src_layout, void* dst, int64_t n, size_t elem_size) {
  check_element_size(elem_size, "gather_strided");
  if (n == 0) return;
  if (elem_size == 4) {
    gather_strided_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        static_cast<const uint32_t*>(src), src_layout, static_cast<uint32_t*>(dst), n);
  } else {
    gather_strided_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        static_cast<const uint8_t*>(src), src_layout, static_cast<uint8_t*>(dst), n);
  }
  QAT_CUDA_CHECK_LAUNCH(gather_strided_kernel);
}

void scatter_strided(const void* src, void* dst, const StridedLayout& dst_layout, int64_t n, size_t elem_size) {
  check_element_size(elem_size, "scatter_strided");
  if (n == 0) return;
  if (elem_size == 4) {
    scatter_strided_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), dst_layout, n);
  } else {
    scatter_strided_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(
        static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), dst_layout, n);
  }
  QAT_CUDA_CHECK_LAUNCH(scatter_strided_kernel);
}

void fill(float* base, const StridedLayout& layout, float value, int64_t n) {
  if (n == 0) return;
  fill_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(base, layout, value, n);
  QAT_CUDA_CHECK_LAUNCH(fill_kernel);
}

void scale(float* base, const StridedLayout& layout, float s, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(base, layout, s, n);
  QAT_CUDA_CHECK_LAUNCH(scale_kernel);
}

void add_scaled(float* dst, const float* src, float alpha, int64_t n) {
  if (n == 0) return;
  add_scaled_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock>>>(dst, src, alpha, n);
  QAT_CUDA_CHECK_LAUNCH(add_scaled_kernel);
}

}  // namespace qat::tensor_cuda
