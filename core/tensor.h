#pragma once
// Tensor: a cheap handle (shared_ptr) to a TensorImpl, which views a Storage
// through sizes, strides and an offset (in elements). Copies of a Tensor share
// the impl (like PyTorch's Tensor); views made by reshape/narrow share the
// storage and its version counter. Autograd state (requires_grad, grad,
// grad_fn) lives on the impl.
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace qat {

class Generator;
struct Node;
class RowUpdateHook;

// One allocation: host memory (64-byte aligned, core/allocator.h) or, for
// Device::cuda, device memory (core/cuda_runtime.h; throws where this build or
// this machine has no GPU). `version` counts in-place writes to it, so
// autograd can tell when a tensor saved for backward was modified.
struct Storage {
  explicit Storage(size_t nbytes, Device device = Device::cpu);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  Device device = Device::cpu;
  uint64_t version = 0;
};

class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // leaves: accumulated gradient
  std::shared_ptr<Node> grad_fn;     // non-leaves: the node that made it
  // Parameters: what an optimizer tells as it updates the rows (core/update_hook.h).
  std::shared_ptr<RowUpdateHook> update_hook;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (contiguous; CPU unless a device is given) ----
  // A cuda tensor needs a CUDA build and a usable GPU; otherwise these throw
  // saying which is missing (cuda::require).
  static Tensor empty(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor ones(const Shape& sizes);
  static Tensor full(const Shape& sizes, float value);
  static Tensor from_vector(const std::vector<float>& v, const Shape& sizes);
  static Tensor from_vector_i32(const std::vector<int32_t>& v, const Shape& sizes);
  static Tensor randn(const Shape& sizes, Generator& gen, float mean = 0.f, float std = 1.f);
  static Tensor uniform(const Shape& sizes, Generator& gen, float lo, float hi);
  static Tensor scalar(float v) { return from_vector({v}, {}); }

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t numel() const;
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  bool is_contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  uint64_t version() const { return impl().storage->version; }
  void bump_version() { ++impl().storage->version; }
  bool same_storage(const Tensor& o) const { return impl().storage == o.impl().storage; }
  TensorImpl* impl_ptr() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_shared() const { return impl_; }

  // ---- data access (pointer at the view's offset) ----
  // data(): host memory for CPU code; refuses a tensor on another device
  // (its pointer is not host memory). device_data(): device memory for a
  // CUDA kernel; refuses a CPU tensor.
  template <class T>
  T* data() const {
    QAT_CHECK(dtype() == dtype_of<T>(), "Tensor::data: tensor is ", dtype_name(dtype()),
              ", accessed as ", dtype_name(dtype_of<T>()));
    if (impl().storage->device != Device::cpu) throw_not_on_host(dtype_name(dtype_of<T>()));
    return static_cast<T*>(impl().storage->data) + impl().offset;
  }
  template <class T>
  T* device_data() const {
    QAT_CHECK(dtype() == dtype_of<T>(), "Tensor::device_data: tensor is ", dtype_name(dtype()),
              ", accessed as ", dtype_name(dtype_of<T>()));
    QAT_CHECK(impl().storage->device == Device::cuda, "Tensor::device_data: the tensor (shape ", sizes(),
              ") is on ", device_name(device()), ", not on cuda");
    return static_cast<T*>(impl().storage->data) + impl().offset;
  }
  float item() const;                    // any device (a cuda tensor's value is copied to the host)
  std::vector<float> to_vector() const;  // f32 only, any layout, any device

  // ---- views and copies (no autograd: see ops for the differentiable ones) ----
  Tensor view(const Shape& sizes) const;       // contiguous only; one -1 allowed
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor contiguous() const;                    // self if already contiguous
  Tensor clone() const;                         // fresh contiguous copy
  Tensor to(DType dtype) const;                 // converting copy (f32<->ints, saturating round); CPU only
  // A copy on `device` (contiguous; no autograd history), or self when the
  // tensor is there already. To the host from any view; to the device from
  // any CPU view.
  Tensor to(Device device) const;
  Tensor detach() const;                        // same storage, no autograd history
  void copy_(const Tensor& src);                // same shape, either device; bumps version

  // ---- in-place (bump the version counter; CPU only) ----
  Tensor& fill_(float v);
  Tensor& zero_() { return fill_(0.f); }
  Tensor& add_(const Tensor& other, float alpha = 1.f);  // same shape
  Tensor& mul_(float s);

  // ---- autograd ----
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool on);
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g) { impl().grad = g.impl_; }
  void zero_grad() { impl().grad.reset(); }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  // Runs backward from this tensor. A scalar needs no gradient argument.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // ---- optimizer update hook (core/update_hook.h); views and detach() do not carry it ----
  RowUpdateHook* update_hook() const { return impl().update_hook.get(); }
  void set_update_hook(std::shared_ptr<RowUpdateHook> hook) { impl().update_hook = std::move(hook); }

 private:
  // A new impl on the same storage and view, with no autograd state or hook.
  std::shared_ptr<TensorImpl> alias_impl() const;
  TensorImpl& impl() const {
    QAT_CHECK(impl_ != nullptr, "Tensor: use of an undefined tensor");
    return *impl_;
  }
  [[noreturn]] void throw_not_on_host(const char* as) const;
  std::shared_ptr<TensorImpl> impl_;
};

Shape contiguous_strides(const Shape& sizes);
int64_t shape_numel(const Shape& sizes);

}  // namespace qat
