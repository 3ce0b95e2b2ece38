#pragma once
// Helpers shared by the op implementations (not part of the public API).
#include "core/autograd.h"
#include "core/profiler.h"
#include "core/tensor.h"

namespace qat::detail {

inline void check_f32(const Tensor& t, const char* op, const char* what) {
  QAT_CHECK(t.defined(), op, ": ", what, " is undefined");
  QAT_CHECK(t.dtype() == DType::f32, op, ": expected ", what, " float32, got ", dtype_name(t.dtype()));
}

inline void check_dim(const Tensor& t, int64_t nd, const char* op, const char* what, const char* layout) {
  QAT_CHECK(t.dim() == nd, op, ": expected ", what, " ", layout, ", got shape ", t.sizes());
}

// Elementwise loops above this many elements go parallel.
constexpr int64_t kParallelGrain = 1 << 15;

}  // namespace qat::detail
