#include "core/ops/elementwise.h"

#include "core/ops/broadcast.h"
#include "core/ops/common.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

using op_math::BinaryOp;

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    QAT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " do not broadcast (dim ", i, ": ",
              da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// Strides of t seen through the broadcast shape `out` (0 where broadcast).
Shape strides_in(const Tensor& t, const Shape& out) { return op_math::broadcast_strides(t, out); }

// Visits out's elements in row-major order with the matching offsets of a and b.
template <class F>
void for_each_broadcast(const Shape& out, const Shape& sa, const Shape& sb, F&& f) {
  const int64_t nd = static_cast<int64_t>(out.size());
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  if (nd == 0) {
    f(0, 0, 0);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  const int64_t inner = out[nd - 1], ia = sa[nd - 1], ib = sb[nd - 1];
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; i += inner) {
    for (int64_t j = 0; j < inner; ++j) f(i + j, oa + j * ia, ob + j * ib);
    for (int64_t d = nd - 2; d >= 0; --d) {
      oa += sa[d];
      ob += sb[d];
      if (++idx[d] < out[d]) break;
      oa -= sa[d] * out[d];
      ob -= sb[d] * out[d];
      idx[d] = 0;
    }
  }
}

// The forward value of a binary op; on cuda, its twin (core/ops/elementwise.cu).
// The op is a template argument so that the CPU loops see a constant.
template <BinaryOp kind>
Tensor binary_forward(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_f32_any_device(a, op, "a");
  detail::check_f32_any_device(b, op, "b");
  detail::check_same_device(op, {{"a", &a}, {"b", &b}});
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
#if QAT_WITH_CUDA
  if (a.device() == Device::cuda) return cuda_twin::binary_forward(a, b, shape, kind);
#endif
  const auto f = [](float x, float y) { return op_math::binary_value(kind, x, y); };
  Tensor out = Tensor::empty(shape);
  float* po = out.data<float>();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const int64_t n = out.numel();
  if (a.sizes() == shape && b.sizes() == shape && a.is_contiguous() && b.is_contiguous()) {
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
  } else if (b.numel() == 1 && a.sizes() == shape && a.is_contiguous()) {
    const float s = *pb;
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], s);
  } else {
    for_each_broadcast(shape, strides_in(a, shape), strides_in(b, shape),
                       [&](int64_t i, int64_t oa, int64_t ob) { po[i] = f(pa[oa], pb[ob]); });
  }
  return out;
}

// a (op) s, elementwise; on cuda, its twin (core/ops/elementwise.cu).
template <BinaryOp kind>
Tensor scalar_forward(const Tensor& a, const char* op, float s) {
  detail::check_f32_any_device(a, op, "input");
#if QAT_WITH_CUDA
  if (a.device() == Device::cuda) return cuda_twin::scalar_forward(a, kind, s);
#endif
  const auto f = [s](float x) { return op_math::binary_value(kind, x, s); };
  Tensor c = a.contiguous();
  Tensor out = Tensor::empty(a.sizes());
  const float* pa = c.data<float>();
  float* po = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i]);
  return out;
}

}  // namespace

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  QAT_CHECK(shape.size() <= g.sizes().size(), "sum_to: cannot reduce ", g.sizes(), " to ", shape);
  detail::check_f32_any_device(g, "sum_to", "input");
#if QAT_WITH_CUDA
  if (g.device() == Device::cuda) return cuda_twin::sum_to(g, shape);  // core/ops/elementwise.cu
#endif
  Tensor out = Tensor::zeros(shape);
  Tensor gc = g.contiguous();
  const Shape so = strides_in(out, g.sizes());
  const Shape sg = contiguous_strides(g.sizes());
  float* po = out.data<float>();
  const float* pg = gc.data<float>();
  for_each_broadcast(g.sizes(), sg, so, [&](int64_t, int64_t og, int64_t oo) { po[oo] += pg[og]; });
  return out;
}

// d(a+b) = g, d(a-b) = (g, -g)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<BinaryOp::add>(a, b, "add");
  return record(out, "add", {&a, &b}, [sa = a.sizes(), sb = b.sizes()](const Tensor& g, const NeedGrad& need) {
    return TensorList{need[0] ? sum_to(g, sa) : Tensor(), need[1] ? sum_to(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<BinaryOp::sub>(a, b, "sub");
  return record(out, "sub", {&a, &b}, [sa = a.sizes(), sb = b.sizes()](const Tensor& g, const NeedGrad& need) {
    return TensorList{need[0] ? sum_to(g, sa) : Tensor(), need[1] ? sum_to(neg(g), sb) : Tensor()};
  });
}

// d(a*b) = (g*b, g*a); each side saves only the other operand it needs.
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<BinaryOp::mul>(a, b, "mul");
  const bool need_a = any_requires_grad({&a}), need_b = any_requires_grad({&b});
  return record(out, "mul", {&a, &b},
                [sa = Saved(need_b ? a : Tensor()), sb = Saved(need_a ? b : Tensor()), shape_a = a.sizes(),
                 shape_b = b.sizes()](const Tensor& g, const NeedGrad& need) {
                  TensorList r(2);
                  if (need[0]) r[0] = sum_to(mul(g, sb.get("mul")), shape_a);
                  if (need[1]) r[1] = sum_to(mul(g, sa.get("mul")), shape_b);
                  return r;
                });
}

// d(a/b) = (g/b, -g*a/b^2)
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<BinaryOp::div>(a, b, "div");
  return record(out, "div", {&a, &b}, [sa = Saved(a), sb = Saved(b)](const Tensor& g, const NeedGrad& need) {
    const Tensor& av = sa.get("div");
    const Tensor& bv = sb.get("div");
    TensorList r(2);
    if (need[0]) r[0] = sum_to(div(g, bv), av.sizes());
    if (need[1]) r[1] = sum_to(neg(div(mul(g, av), mul(bv, bv))), bv.sizes());
    return r;
  });
}

Tensor add(const Tensor& a, float s) {
  Tensor out = scalar_forward<BinaryOp::add>(a, "add", s);
  return record(out, "add_scalar", {&a}, [](const Tensor& g, const NeedGrad&) { return TensorList{g}; });
}

Tensor mul(const Tensor& a, float s) {
  Tensor out = scalar_forward<BinaryOp::mul>(a, "mul", s);
  return record(out, "mul_scalar", {&a}, [s](const Tensor& g, const NeedGrad&) { return TensorList{mul(g, s)}; });
}

Tensor neg(const Tensor& a) { return mul(a, -1.f); }

}  // namespace qat
