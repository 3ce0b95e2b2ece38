#pragma once
// The kernels behind Tensor's device paths (core/tensor.cpp, kernels in
// core/tensor.cu): copies of strided views and the in-place ops on cuda
// tensors. Raw device pointers at the view's first element; n elements.
// Every per-element rule is a host-and-device function (core/strided_layout.h,
// core/ops/math.h) that the [math] tests run on the host. CUDA builds only.
#include <cstddef>
#include <cstdint>

#include "core/strided_layout.h"

namespace qat::tensor_cuda {

// dst[i] = src[strided_offset(i, src_layout)]: a strided view made contiguous.
// Elements of elem_size bytes (1 or 4: every dtype).
void gather_strided(const void* src, const StridedLayout& src_layout, void* dst, int64_t n, size_t elem_size);
// dst[strided_offset(i, dst_layout)] = src[i]: contiguous values into a strided view.
void scatter_strided(const void* src, void* dst, const StridedLayout& dst_layout, int64_t n, size_t elem_size);
// base[strided_offset(i, layout)] = value.
void fill(float* base, const StridedLayout& layout, float value, int64_t n);
// base[strided_offset(i, layout)] *= s.
void scale(float* base, const StridedLayout& layout, float s, int64_t n);
// dst[i] = op_math::add_scaled(dst[i], alpha, src[i]) (contiguous both).
void add_scaled(float* dst, const float* src, float alpha, int64_t n);

}  // namespace qat::tensor_cuda
