#include "core/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/allocator.h"
#include "core/checked.h"
#include "core/autograd.h"
#include "core/cuda_runtime.h"
#include "core/generator.h"
#include "core/ops/common.h"
#include "core/ops/math.h"
#include "core/strided_layout.h"
#if QAT_WITH_CUDA
#include "core/tensor_cuda.h"
#endif

namespace qat {

// ---------------------------------------------------------------- dtype

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::i32: return "int32";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= sizes[i];
  }
  return st;
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    QAT_CHECK(s >= 0, "shape ", sizes, ": negative size");
    n = checked_mul(n, s, "shape size");
  }
  return n;
}

// ---------------------------------------------------------------- storage

Storage::Storage(size_t nbytes_, Device device_) : nbytes(nbytes_), device(device_) {
  if (device_ == Device::cuda) {
    cuda::require("Storage on cuda");
    data = cuda::allocate(nbytes_);
  } else {
    data = cpu_allocate(nbytes_);
  }
}

Storage::~Storage() {
  if (device == Device::cuda) cuda::deallocate(data, nbytes);
  else cpu_free(data, nbytes);
}

// ---------------------------------------------------------------- factories

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes) QAT_CHECK(s >= 0, "Tensor::empty: negative size in ", sizes);
  const int64_t nbytes = checked_mul(shape_numel(sizes), static_cast<int64_t>(dtype_size(dtype)), "Tensor::empty");
  QAT_CHECK(nbytes <= kMaxTensorBytes, "Tensor::empty: shape ", sizes, " of ", dtype_name(dtype), " needs ", nbytes,
            " bytes (at most ", kMaxTensorBytes, ")");
  if (device != Device::cpu)
    cuda::require(detail::cat("a ", device_name(device), " tensor (shape ", sizes, ", ", dtype_name(dtype), ")"));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& sizes, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  if (device == Device::cpu) std::memset(t.impl().storage->data, 0, t.nbytes());
  else cuda::memset_zero(t.impl().storage->data, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& sizes) { return full(sizes, 1.f); }

Tensor Tensor::full(const Shape& sizes, float value) {
  Tensor t = empty(sizes);
  float* p = t.data<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = value;
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& sizes) {
  QAT_CHECK(static_cast<int64_t>(v.size()) == shape_numel(sizes), "Tensor::from_vector: ", v.size(),
            " values for shape ", sizes);
  Tensor t = empty(sizes);
  std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_vector_i32(const std::vector<int32_t>& v, const Shape& sizes) {
  QAT_CHECK(static_cast<int64_t>(v.size()) == shape_numel(sizes), "Tensor::from_vector_i32: ", v.size(),
            " values for shape ", sizes);
  Tensor t = empty(sizes, DType::i32);
  std::memcpy(t.data<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

Tensor Tensor::randn(const Shape& sizes, Generator& gen, float mean, float std) {
  Tensor t = empty(sizes);
  float* p = t.data<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = mean + std * gen.normal();
  return t;
}

Tensor Tensor::uniform(const Shape& sizes, Generator& gen, float lo, float hi) {
  Tensor t = empty(sizes);
  float* p = t.data<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = gen.uniform(lo, hi);
  return t;
}

// ---------------------------------------------------------------- metadata

int64_t Tensor::size(int64_t d) const {
  const int64_t nd = dim();
  if (d < 0) d += nd;
  QAT_CHECK(d >= 0 && d < nd, "Tensor::size: dim ", d, " out of range for shape ", sizes());
  return sizes()[d];
}

int64_t Tensor::numel() const { return shape_numel(sizes()); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes().size(); i-- > 0;) {
    if (sizes()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= sizes()[i];
  }
  return true;
}

float Tensor::item() const {
  QAT_CHECK(numel() == 1, "Tensor::item: expected one element, got shape ", sizes());
  if (device() != Device::cpu) return to(Device::cpu).item();
  switch (dtype()) {
    case DType::f32: return *data<float>();
    case DType::i8: return *data<int8_t>();
    case DType::u8: return *data<uint8_t>();
    case DType::i32: return static_cast<float>(*data<int32_t>());
  }
  return 0.f;
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = device() == Device::cpu ? contiguous() : to(Device::cpu);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

// ---------------------------------------------------------------- views

namespace {
// Visits every element of a strided view in row-major order, calling
// f(linear_index, storage_offset).
template <class F>
void for_each_offset(const Shape& sizes, const Shape& strides, int64_t base, F&& f) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  const int64_t n = shape_numel(sizes);
  if (n == 0) return;
  if (nd == 0) {
    f(0, base);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  const int64_t inner = sizes[nd - 1], inner_stride = strides[nd - 1];
  int64_t off = base;
  for (int64_t i = 0; i < n; i += inner) {
    for (int64_t j = 0; j < inner; ++j) f(i + j, off + j * inner_stride);
    for (int64_t d = nd - 2; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
}
}  // namespace

Tensor Tensor::view(const Shape& new_sizes) const {
  Shape s = new_sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      QAT_CHECK(infer < 0, "view: only one -1 allowed, got ", new_sizes);
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    QAT_CHECK(known > 0 && numel() % known == 0, "view: cannot view shape ", sizes(), " as ", new_sizes);
    s[infer] = numel() / known;
  }
  QAT_CHECK(shape_numel(s) == numel(), "view: shape ", sizes(), " (", numel(), " elements) cannot become ", new_sizes);
  QAT_CHECK(is_contiguous(), "view: tensor of shape ", sizes(), " is not contiguous; call contiguous() first");
  auto impl = alias_impl();
  impl->sizes = s;
  impl->strides = contiguous_strides(s);
  return Tensor(std::move(impl));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  const int64_t nd = dim();
  if (d < 0) d += nd;
  QAT_CHECK(d >= 0 && d < nd, "narrow: dim ", d, " out of range for shape ", sizes());
  QAT_CHECK(start >= 0 && length >= 0 && start + length <= sizes()[d], "narrow: range [", start, ", ",
            start + length, ") out of bounds for dim ", d, " of shape ", sizes());
  auto impl = alias_impl();
  impl->offset += start * impl->strides[d];
  impl->sizes[d] = length;
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const { return Tensor(alias_impl()); }

std::shared_ptr<TensorImpl> Tensor::alias_impl() const {
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->grad.reset();
  impl->grad_fn.reset();
  impl->requires_grad = false;
  impl->update_hook.reset();  // the hook belongs to the parameter, not to views of its storage
  return impl;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  const size_t es = dtype_size(dtype());
  if (device() != Device::cpu) {
    Tensor out = empty(sizes(), dtype(), device());
    const char* src = static_cast<const char*>(impl().storage->data) + offset() * es;
    if (is_contiguous()) {
      cuda::copy(out.impl().storage->data, device(), src, device(), nbytes());
    } else {  // (without CUDA, empty() above has thrown: no device tensors)
#if QAT_WITH_CUDA
      // A strided view: one kernel gathers it (core/tensor.cu).
      tensor_cuda::gather_strided(src, make_strided_layout(sizes(), strides(), "clone"), out.impl().storage->data,
                                  numel(), es);
#endif
    }
    return out;
  }
  Tensor out = empty(sizes(), dtype());
  const char* src = static_cast<const char*>(impl().storage->data);
  char* dst = static_cast<char*>(out.impl().storage->data);
  if (is_contiguous()) {
    std::memcpy(dst, src + offset() * es, nbytes());
  } else {
    for_each_offset(sizes(), strides(), offset(),
                    [&](int64_t i, int64_t off) { std::memcpy(dst + i * es, src + off * es, es); });
  }
  return out;
}

namespace {
template <class T>
T saturate_round(float v) {
  const float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(std::numeric_limits<T>::min()))) return std::numeric_limits<T>::min();
  if (r >= static_cast<float>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(r);
}

float load_as_float(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::i8: return t.data<int8_t>()[i];
    case DType::u8: return t.data<uint8_t>()[i];
    case DType::i32: return static_cast<float>(t.data<int32_t>()[i]);
  }
  return 0.f;
}
}  // namespace

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return contiguous().clone();
  QAT_CHECK(device() == Device::cpu, "to(", dtype_name(target), "): converting a ", dtype_name(dtype()), " tensor on ",
            device_name(device()), " runs on the CPU only; .to(Device::cpu) first");
  Tensor src = contiguous();
  Tensor out = empty(sizes(), target);
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = load_as_float(src, i);
    switch (target) {
      case DType::f32: out.data<float>()[i] = v; break;
      case DType::i8: out.data<int8_t>()[i] = saturate_round<int8_t>(v); break;
      case DType::u8: out.data<uint8_t>()[i] = saturate_round<uint8_t>(v); break;
      case DType::i32: out.data<int32_t>()[i] = saturate_round<int32_t>(v); break;
    }
  }
  return out;
}

// Where the view's elements lie in its storage: [lo, hi] in elements.
namespace {
std::pair<int64_t, int64_t> storage_span(const Shape& sizes, const Shape& strides, int64_t offset) {
  int64_t lo = offset, hi = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return {offset, offset - 1};  // no elements
    const int64_t reach = (sizes[d] - 1) * strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}
}  // namespace

void Tensor::throw_not_on_host(const char* as) const {
  QAT_FAIL("Tensor::data<", as, ">: the tensor (shape ", sizes(), ") is on ", device_name(device()),
           ", and CPU code cannot read device memory: an op without a ", device_name(device()),
           " kernel was given it, or it needs .to(Device::cpu) first");
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  const size_t es = dtype_size(dtype());
  if (device() == Device::cpu) {  // to the device: any host view, made contiguous here
    const Tensor src = contiguous();
    Tensor out = empty(sizes(), dtype(), target);
    cuda::copy(out.impl().storage->data, target, static_cast<const char*>(src.impl().storage->data) + src.offset() * es, Device::cpu, nbytes());
    return out;
  }
  // To the host: the bytes the view spans, then (for a strided view) the CPU's gather.
  if (is_contiguous()) {
    Tensor out = empty(sizes(), dtype());
    cuda::copy(out.impl().storage->data, Device::cpu, static_cast<const char*>(impl().storage->data) + offset() * es,
               device(), nbytes());
    return out;
  }
  const auto [lo, hi] = storage_span(sizes(), strides(), offset());
  if (hi < lo) return empty(sizes(), dtype());
  auto staged = std::make_shared<TensorImpl>();
  staged->storage = std::make_shared<Storage>(static_cast<size_t>(hi - lo + 1) * es);
  cuda::copy(staged->storage->data, Device::cpu, static_cast<const char*>(impl().storage->data) + lo * es, device(),
             static_cast<size_t>(hi - lo + 1) * es);
  staged->sizes = sizes();
  staged->strides = strides();
  staged->offset = offset() - lo;
  staged->dtype = dtype();
  return Tensor(std::move(staged)).clone();
}

// ---------------------------------------------------------------- in-place

namespace {
void check_inplace(const Tensor& t, const char* op) {
  QAT_CHECK(!(grad_enabled() && t.requires_grad() && t.is_leaf()), op,
            ": in-place change of a leaf tensor that requires grad (shape ", t.sizes(),
            "); wrap it in NoGradGuard");
}

// The in-place ops of a cuda tensor run the kernels of core/tensor.cu; where
// there is no GPU (a tensor only labelled cuda, in the tests) they refuse
// before launching, and a build without CUDA refuses them as CPU-only.
#if QAT_WITH_CUDA
void check_device_kernels(const Tensor&, const char* op) { cuda::require(op); }
#else
void check_device_kernels(const Tensor& t, const char* op) {
  QAT_CHECK(t.device() == Device::cpu, op, ": the tensor (shape ", t.sizes(), ") is on ", device_name(t.device()),
            "; ", op, " runs on the CPU only");
}
#endif

#if QAT_WITH_CUDA
StridedLayout layout_of(const Tensor& t, const char* op) { return make_strided_layout(t.sizes(), t.strides(), op); }
#endif
}  // namespace

void Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  QAT_CHECK(src.sizes() == sizes() && src.dtype() == dtype(), "copy_: destination ", sizes(), " ",
            dtype_name(dtype()), ", source ", src.sizes(), " ", dtype_name(src.dtype()));
  const size_t es = dtype_size(dtype());
#if QAT_WITH_CUDA
  if (device() == Device::cuda && !is_contiguous()) {
    // Into a strided device view: the values contiguous on the device (a
    // copy of their own when they share this storage), then one kernel.
    const Tensor s = src.device() != Device::cuda ? src.to(Device::cuda)
                     : same_storage(src)           ? src.clone()
                                                   : src.contiguous();
    tensor_cuda::scatter_strided(static_cast<const char*>(s.impl().storage->data) + s.offset() * es,
                                 static_cast<char*>(impl().storage->data) + offset() * es,
                                 layout_of(*this, "copy_"), numel(), es);
    bump_version();
    return;
  }
#endif
  if (device() != Device::cpu || src.device() != Device::cpu) {
    QAT_CHECK(is_contiguous(), "copy_: a ", device_name(device()), " destination must be contiguous, got shape ",
              sizes(), " strides ", strides());
    // A strided device source is made contiguous on the device (core/tensor.cu);
    // one overlapping this destination is copied first (cudaMemcpy's ranges
    // must not overlap, unlike the host's memmove).
    const Tensor s = same_storage(src) && src.device() == device() ? src.clone() : src.contiguous();
    cuda::copy(static_cast<char*>(impl().storage->data) + offset() * es, device(),
               static_cast<const char*>(s.impl().storage->data) + s.offset() * es, s.device(), nbytes());
    bump_version();
    return;
  }
  Tensor s = src.contiguous();
  const char* sp = static_cast<const char*>(s.impl().storage->data) + s.offset() * es;
  char* base = static_cast<char*>(impl().storage->data);
  if (is_contiguous()) {
    std::memmove(base + offset() * es, sp, nbytes());
  } else {
    for_each_offset(sizes(), strides(), offset(),
                    [&](int64_t i, int64_t off) { std::memcpy(base + off * es, sp + i * es, es); });
  }
  bump_version();
}

Tensor& Tensor::fill_(float v) {
  check_inplace(*this, "fill_");
  if (device() != Device::cpu) check_device_kernels(*this, "fill_");
  QAT_CHECK(dtype() == DType::f32, "fill_: expected float32, got ", dtype_name(dtype()));
#if QAT_WITH_CUDA
  if (device() == Device::cuda) {
    tensor_cuda::fill(device_data<float>(), layout_of(*this, "fill_"), v, numel());
    bump_version();
    return *this;
  }
#endif
  float* base = static_cast<float*>(impl().storage->data);
  for_each_offset(sizes(), strides(), offset(), [&](int64_t, int64_t off) { base[off] = v; });
  bump_version();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, float alpha) {
  check_inplace(*this, "add_");
  detail::check_same_device("add_", {{"destination", this}, {"other", &other}});
  if (device() != Device::cpu) check_device_kernels(*this, "add_");
  QAT_CHECK(dtype() == DType::f32 && other.dtype() == DType::f32, "add_: expected float32, got ",
            dtype_name(dtype()), " and ", dtype_name(other.dtype()));
  QAT_CHECK(other.sizes() == sizes(), "add_: shape ", sizes(), " vs ", other.sizes());
  QAT_CHECK(is_contiguous(), "add_: destination must be contiguous, shape ", sizes());
  const int64_t n = numel();
#if QAT_WITH_CUDA
  if (device() == Device::cuda) {
    // Threads run in no order: another view of this storage is read from a copy.
    const bool overlaps = same_storage(other) && (other.offset() != offset() || other.strides() != strides());
    const Tensor o = overlaps ? other.clone() : other.contiguous();
    tensor_cuda::add_scaled(device_data<float>(), o.device_data<float>(), alpha, n);
    bump_version();
    return *this;
  }
#endif
  const Tensor o = other.contiguous();
  float* d = data<float>();
  const float* s = o.data<float>();
  for (int64_t i = 0; i < n; ++i) d[i] = op_math::add_scaled(d[i], alpha, s[i]);
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(float s) {
  check_inplace(*this, "mul_");
  if (device() != Device::cpu) check_device_kernels(*this, "mul_");
  QAT_CHECK(dtype() == DType::f32, "mul_: expected float32, got ", dtype_name(dtype()));
#if QAT_WITH_CUDA
  if (device() == Device::cuda) {
    tensor_cuda::scale(device_data<float>(), layout_of(*this, "mul_"), s, numel());
    bump_version();
    return *this;
  }
#endif
  float* base = static_cast<float*>(impl().storage->data);
  for_each_offset(sizes(), strides(), offset(), [&](int64_t, int64_t off) { base[off] *= s; });
  bump_version();
  return *this;
}

// ---------------------------------------------------------------- autograd

Tensor& Tensor::set_requires_grad(bool on) {
  QAT_CHECK(is_leaf() || on, "set_requires_grad(false) on a non-leaf tensor; use detach()");
  QAT_CHECK(!on || dtype() == DType::f32, "set_requires_grad: only float32 tensors can require grad, got ",
            dtype_name(dtype()));
  impl().requires_grad = on;
  return *this;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const { run_backward(*this, grad, retain_graph); }

}  // namespace qat
