#include "core/ops/shape_ops.h"

#include "core/ops/common.h"
#include "core/ops/elementwise.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor out = x.contiguous().view(shape);
  if (out.same_storage(x)) out = out.detach();  // a fresh impl: the view gets its own history
  return record(out, "reshape", {&x}, [in_shape = x.sizes()](const Tensor& g, const NeedGrad&) {
    return TensorList{g.contiguous().view(in_shape)};
  });
}

Tensor flatten(const Tensor& x, int64_t start_dim) {
  const int64_t nd = x.dim();
  if (start_dim < 0) start_dim += nd;
  QAT_CHECK(start_dim >= 0 && start_dim < std::max<int64_t>(nd, 1), "flatten: start_dim ", start_dim,
            " out of range for shape ", x.sizes());
  Shape s(x.sizes().begin(), x.sizes().begin() + start_dim);
  s.push_back(-1);
  if (x.numel() == 0) s.back() = 0;
  return reshape(x, s);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Tensor out = x.narrow(dim, start, length).contiguous();
  if (out.same_storage(x)) out = out.clone();
  return record(out, "slice", {&x}, [in_shape = x.sizes(), dim, start, length](const Tensor& g, const NeedGrad&) {
    Tensor dx = Tensor::zeros(in_shape, DType::f32, g.device());
    dx.narrow(dim, start, length).copy_(g);
    return TensorList{dx};
  });
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  QAT_CHECK(!xs.empty(), "concat: no tensors");
  const Tensor& first = xs.front();
  QAT_CHECK(dim >= 0 && dim < first.dim(), "concat: dim ", dim, " out of range for ", first.dim(), "-d tensors");
  Shape shape = first.sizes();
  shape[static_cast<size_t>(dim)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    bool fits = x.dim() == first.dim() && x.dtype() == first.dtype() && x.device() == first.device();
    for (int64_t d = 0; fits && d < x.dim(); ++d) fits = d == dim || x.size(d) == first.size(d);
    QAT_CHECK(fits, "concat: tensor ", i, " is ", dtype_name(x.dtype()), " ", x.sizes(), " on ", device_name(x.device()),
              "; tensor 0 is ", dtype_name(first.dtype()), " ", first.sizes(), " on ", device_name(first.device()),
              " (only dim ", dim, " may differ)");
    shape[static_cast<size_t>(dim)] += x.size(dim);
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Tensor& x : xs) {
    starts.push_back(at);
    out.narrow(dim, at, x.size(dim)).copy_(x);
    at += x.size(dim);
  }
  std::vector<const Tensor*> inputs;
  std::vector<int64_t> lengths;
  for (const Tensor& x : xs) inputs.push_back(&x), lengths.push_back(x.size(dim));
  return record(out, "concat", inputs, [dim, starts, lengths](const Tensor& g, const NeedGrad& need) {
    TensorList r(starts.size());
    for (size_t i = 0; i < starts.size(); ++i)
      if (need[i]) {
        r[i] = g.narrow(dim, starts[i], lengths[i]).contiguous();
        if (r[i].same_storage(g)) r[i] = r[i].clone();  // (gradients are summed in place)
      }
    return r;
  });
}

Tensor sum(const Tensor& x) {
  detail::check_f32_any_device(x, "sum", "input");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::sum(x);  // core/ops/shape_ops.cu
#endif
  Tensor xc = x.contiguous();
  const float* p = xc.data<float>();
  double acc = 0;
  const int64_t n = xc.numel();
#pragma omp parallel for reduction(+ : acc) if (n > detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) acc += p[i];
  Tensor out = Tensor::scalar(static_cast<float>(acc));
  return record(out, "sum", {&x}, [shape = x.sizes()](const Tensor& g, const NeedGrad&) {
    return TensorList{Tensor::full(shape, g.item())};
  });
}

Tensor mean(const Tensor& x) {
  detail::check_f32_any_device(x, "mean", "input");
  QAT_CHECK(x.numel() > 0, "mean: empty tensor of shape ", x.sizes());
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::mean(x);  // core/ops/shape_ops.cu
#endif
  Tensor s = sum(x);
  const float inv = 1.f / static_cast<float>(x.numel());
  Tensor out = Tensor::scalar(s.item() * inv);
  return record(out, "mean", {&x}, [shape = x.sizes(), inv](const Tensor& g, const NeedGrad&) {
    return TensorList{Tensor::full(shape, g.item() * inv)};
  });
}

// On cuda through sum_to's twin.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_f32_any_device(x, "sum", "input");
  const int64_t nd = x.dim();
  if (dim < 0) dim += nd;
  QAT_CHECK(dim >= 0 && dim < nd, "sum: dim ", dim, " out of range for shape ", x.sizes());
  Shape kept = x.sizes();
  kept[dim] = 1;
  Tensor out = sum_to(x.contiguous(), kept);
  Shape final_shape = kept;
  if (!keepdim) final_shape.erase(final_shape.begin() + dim);
  out = out.view(final_shape);
  return record(out, "sum_dim", {&x}, [shape = x.sizes(), kept](const Tensor& g, const NeedGrad&) {
    Tensor gk = g.contiguous().view(kept);
    Tensor dx = Tensor::zeros(shape, DType::f32, g.device());
    return TensorList{add(dx, gk)};
  });
}

}  // namespace qat
