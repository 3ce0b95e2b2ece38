#pragma once
// Elementwise arithmetic with NumPy/PyTorch broadcasting.
// a, b: any shapes that broadcast; out: the broadcast shape.
// Backward: each input's gradient is the output gradient (times the partial
// derivative) summed over the dimensions that were broadcast (sum_to).
#include "core/tensor.h"

namespace qat {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor neg(const Tensor& a);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, float s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, float s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, float s) { return mul(a, s); }
inline Tensor operator*(float s, const Tensor& a) { return mul(a, s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums g over the dimensions in which `shape` was broadcast to g's shape
// (no autograd). Returns g itself when the shapes already match.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace qat
