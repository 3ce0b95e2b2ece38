#pragma once
// Where the elements of a strided view lie: the per-index rule that the CUDA
// kernels of strided copies, in-place ops, broadcasting and sum_to share with
// their host tests (docs/conventions.md, convention 1). Element i in row-major order of
// `sizes` lies at storage offset strided_offset(i, layout) from the view's
// first element. A broadcast operand is the same rule with stride 0 along the
// dimensions it is broadcast in.
#include <cstdint>

#include "core/error.h"
#include "core/host_device.h"

namespace qat {

// Kernels take the layout by value, so it has a fixed capacity; qat's tensors
// have at most 4 dimensions today (N,C,H,W activations, conv weights).
constexpr int kMaxStridedDims = 8;

struct StridedLayout {
  int dims = 0;
  int64_t sizes[kMaxStridedDims] = {};
  int64_t strides[kMaxStridedDims] = {};
};

// Storage offset of element i (row-major over sizes). i < product of sizes,
// so every size is >= 1 whenever this is called.
QAT_HOST_DEVICE inline int64_t strided_offset(int64_t i, const StridedLayout& l) {
  int64_t offset = 0;
  for (int d = l.dims - 1; d >= 0; --d) {
    const int64_t size = l.sizes[d];
    offset += (i % size) * l.strides[d];
    i /= size;
  }
  return offset;
}

// The layout of sizes/strides for a kernel of `op`; refuses more dimensions
// than a layout holds, naming the op.
inline StridedLayout make_strided_layout(const Shape& sizes, const Shape& strides, const char* op) {
  QAT_CHECK(sizes.size() == strides.size(), op, ": ", sizes.size(), " sizes but ", strides.size(), " strides");
  QAT_CHECK(sizes.size() <= static_cast<size_t>(kMaxStridedDims), op, ": a tensor of shape ", sizes, " has ",
            sizes.size(), " dimensions; the CUDA kernels take at most ", kMaxStridedDims);
  StridedLayout l;
  l.dims = static_cast<int>(sizes.size());
  for (int d = 0; d < l.dims; ++d) {
    l.sizes[d] = sizes[static_cast<size_t>(d)];
    l.strides[d] = strides[static_cast<size_t>(d)];
  }
  return l;
}

}  // namespace qat
