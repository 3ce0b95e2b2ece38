#pragma once
// The per-index bodies of broadcasting elementwise ops and sum_to
// (core/ops/elementwise.h), shared by the CPU op's tests and the CUDA twin
// (core/ops/elementwise.cu), and the host functions that lay them out. An
// operand of a broadcast is read through the output's shape with stride 0
// where it is broadcast (core/strided_layout.h).
#include <cstdint>

#include "core/host_device.h"
#include "core/ops/math.h"
#include "core/strided_layout.h"
#include "core/tensor.h"

namespace qat::op_math {

// Output i of a binary op: a and b read at the offsets of i in their layouts.
QAT_HOST_DEVICE inline float broadcast_binary_at(int64_t i, BinaryOp op, const float* a, const StridedLayout& la,
                                                 const float* b, const StridedLayout& lb) {
  return binary_value(op, a[strided_offset(i, la)], b[strided_offset(i, lb)]);
}

// Output k of sum_to: g's elements that broadcast to it, added from 0 in
// g's row-major order (the CPU op's order, so the same bits). `kept` walks
// the output's elements through g's strides (size 1 along the summed
// dimensions), `summed` the `count` elements summed into one output (size 1
// along the kept dimensions).
QAT_HOST_DEVICE inline float sum_to_at(int64_t k, const float* g, const StridedLayout& kept,
                                       const StridedLayout& summed, int64_t count) {
  const float* base = g + strided_offset(k, kept);
  float acc = 0.f;
  for (int64_t r = 0; r < count; ++r) acc += base[strided_offset(r, summed)];
  return acc;
}

// ---------------------------------------------------------------- host side

// t's strides seen through the broadcast shape `out` (0 where broadcast).
inline Shape broadcast_strides(const Tensor& t, const Shape& out) {
  const size_t nd = out.size(), td = t.sizes().size();
  Shape st(nd, 0);
  for (size_t i = 0; i < td; ++i) st[nd - td + i] = t.sizes()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

inline StridedLayout broadcast_layout(const Tensor& t, const Shape& out, const char* op) {
  return make_strided_layout(out, broadcast_strides(t, out), op);
}

struct SumToLayouts {
  StridedLayout kept, summed;
  int64_t count = 1;  // elements summed into each output
};

// The layouts of sum_to(g, shape): shape right-aligned with g's sizes, each
// of its dimensions equal to g's or 1 (then summed), missing ones summed.
inline SumToLayouts sum_to_layouts(const Tensor& g, const Shape& shape) {
  const Shape& gs = g.sizes();
  QAT_CHECK(shape.size() <= gs.size(), "sum_to: cannot reduce ", gs, " to ", shape);
  const size_t nd = gs.size(), lead = nd - shape.size();
  Shape kept_sizes(nd), summed_sizes(nd);
  SumToLayouts l;
  for (size_t d = 0; d < nd; ++d) {
    const int64_t out = d < lead ? 1 : shape[d - lead];
    QAT_CHECK(out == gs[d] || out == 1, "sum_to: cannot reduce ", gs, " to ", shape);
    kept_sizes[d] = out;
    summed_sizes[d] = out == 1 ? gs[d] : 1;
    l.count *= summed_sizes[d];
  }
  l.kept = make_strided_layout(kept_sizes, g.strides(), "sum_to");
  l.summed = make_strided_layout(summed_sizes, g.strides(), "sum_to");
  return l;
}

}  // namespace qat::op_math
