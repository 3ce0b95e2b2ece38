#pragma once
// Helpers shared by the op implementations (not part of the public API).
#include "core/autograd.h"
#include "core/profiler.h"
#include "core/tensor.h"

#include <initializer_list>
#include <vector>
#include <utility>

namespace qat::detail {

// x seen as (outer, channels, inner) around dim `axis` (contiguous layout).
struct ChannelSpan {
  int64_t outer = 1, channels = 1, inner = 1;
};
inline ChannelSpan channel_span(const Tensor& x, int64_t axis) {
  ChannelSpan sp{1, x.size(axis), 1};
  for (int64_t d = 0; d < axis; ++d) sp.outer *= x.size(d);
  for (int64_t d = axis + 1; d < x.dim(); ++d) sp.inner *= x.size(d);
  return sp;
}

// Per-channel constants of a CUDA twin, computed on the host, one after the
// other in one float32 tensor on cuda (a kernel's `params`).
inline Tensor device_constants(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> all;
  for (const std::vector<float>* p : parts) all.insert(all.end(), p->begin(), p->end());
  return Tensor::from_vector(all, {static_cast<int64_t>(all.size())}).to(Device::cuda);
}

// A defined float32 tensor on any device: for ops with a CUDA twin
// (core/ops/cuda_twins.h), which dispatch on the input's device.
inline void check_f32_any_device(const Tensor& t, const char* op, const char* what) {
  QAT_CHECK(t.defined(), op, ": ", what, " is undefined");
  QAT_CHECK(t.dtype() == DType::f32, op, ": expected ", what, " float32, got ", dtype_name(t.dtype()));
}

// ... with `nd` dimensions: "op: expected <what>, got <shape>".
inline void check_f32_dims_any_device(const Tensor& t, int64_t nd, const char* op, const char* what) {
  check_f32_any_device(t, op, "input");
  QAT_CHECK(t.dim() == nd, op, ": expected ", what, ", got ", t.sizes());
}

// A defined float32 tensor on the CPU: ops without a CUDA twin refuse a
// device tensor here, naming themselves, before any pointer is taken.
inline void check_f32(const Tensor& t, const char* op, const char* what) {
  check_f32_any_device(t, op, what);
  QAT_CHECK(t.device() == Device::cpu, op, ": ", what, " (shape ", t.sizes(), ") is on ", device_name(t.device()),
            ", but ", op, " runs on the CPU only; copy it with .to(Device::cpu)");
}

// Every defined tensor of `tensors` on the device of the first: an op never
// mixes devices. The error names the op, both tensors and both devices.
inline void check_same_device(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  const std::pair<const char*, const Tensor*>* first = nullptr;
  for (const auto& named : tensors) {
    if (!named.second || !named.second->defined()) continue;
    if (!first) {
      first = &named;
      continue;
    }
    QAT_CHECK(named.second->device() == first->second->device(), op, ": expected all tensors on one device, but ",
              first->first, " is on ", device_name(first->second->device()), " and ", named.first, " is on ",
              device_name(named.second->device()));
  }
}

// A backward's incoming gradient on the device its op ran on (`op` names the
// backward, e.g. "avg_pool2d backward"): as check_same_device, for a backward
// that saved no tensor to compare with.
inline void check_gradient_device(const Tensor& g, Device input_device, const char* op) {
  QAT_CHECK(g.device() == input_device, op, ": expected all tensors on one device, but input is on ",
            device_name(input_device), " and gradient is on ", device_name(g.device()));
}

inline void check_dim(const Tensor& t, int64_t nd, const char* op, const char* what, const char* layout) {
  QAT_CHECK(t.dim() == nd, op, ": expected ", what, " ", layout, ", got shape ", t.sizes());
}

// Elementwise loops above this many elements go parallel.
constexpr int64_t kParallelGrain = 1 << 15;

}  // namespace qat::detail
