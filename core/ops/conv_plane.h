#pragma once
// Internal to the CPU convolution (core/ops/conv2d.cpp, its oneDNN calls
// and its depthwise kernel, core/ops/depthwise_conv.cpp) and INT8 training's depthwise kernel:
// the measured geometry of one call and the padded, phase-split input plane
// they read their windows from.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/window.h"

namespace qat::conv_detail {

struct Geometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t k() const { return cg() * kh * kw; }
  int64_t p() const { return oh * ow; }
};

// A padded input plane split into stride_w column phases: phase f, padded
// row y, column j holds x[y - pad_h][j stride_w + f - pad_w] (the fill value,
// zero unless given, outside the plane). Tap (ki, kj)'s output row oy then
// reads a contiguous run of OW values: phase (kj dil_w) mod stride_w, row
// oy stride_h + ki dil_h, from column (kj dil_w) / stride_w. So a kernel reads
// whole runs, with no bounds checks and no strided access. Of floats for the
// float depthwise forward, and for INT8 training's depthwise forward on
// planes of u - z (padding 0); of int32 for its gradients and for its
// forward where z is fractional (quant/int8_training/int8_cpu_depthwise.cpp;
// their padding is the input's zero-point integer).
template <class T>
class PhasePlaneOf {
 public:
  PhasePlaneOf(const Geometry& g, const Conv2dParams& p, T fill = T{})
      : g_(g), p_(p), rows_(g.h + 2 * p.pad_h), cols_((g.w + 2 * p.pad_w + p.stride_w - 1) / p.stride_w),
        data_(static_cast<size_t>(p.stride_w * rows_ * cols_), fill) {}

  // The plane of x (H x W); the padding keeps its fill.
  void load(const T* xp) {
    load(xp, [](T v) { return v; });
  }
  // The plane of to(x) (H x W), x of any element type.
  template <class S, class To>
  void load(const S* xp, const To& to) {
    for (int64_t f = 0; f < p_.stride_w; ++f) {
      // Columns j whose input column j stride_w + f - pad_w lies inside.
      const int64_t x0 = f - p_.pad_w, lo = first_inside(x0), hi = end_inside(x0);
      for (int64_t iy = 0; iy < g_.h; ++iy) {
        if (lo == hi) continue;
        T* dst = at(f, iy + p_.pad_h, lo);
        const S* src = xp + iy * g_.w + lo * p_.stride_w + x0;
        if constexpr (std::is_same_v<S, T>)
          if (p_.stride_w == 1) {
            std::memcpy(dst, src, sizeof(T) * (hi - lo));
            continue;
          }
        for (int64_t j = 0; j < hi - lo; ++j) dst[j] = to(src[j * p_.stride_w]);
      }
    }
  }

  // x (H x W) += the plane's inside.
  void add_into(T* xp) const {
    each_inside(xp, [](T& x, T v) { x += v; });
  }
  // put(x[y][x], v) for each pixel of x (H x W) and its value v in the plane.
  template <class D, class Put>
  void each_inside(D* xp, const Put& put) const {
    for (int64_t f = 0; f < p_.stride_w; ++f) {
      const int64_t x0 = f - p_.pad_w, lo = first_inside(x0), hi = end_inside(x0);
      for (int64_t iy = 0; iy < g_.h; ++iy) {
        if (lo == hi) continue;
        const T* src = at(f, iy + p_.pad_h, lo);
        D* dst = xp + iy * g_.w + lo * p_.stride_w + x0;
        for (int64_t j = 0; j < hi - lo; ++j) put(dst[j * p_.stride_w], src[j]);
      }
    }
  }

  // Every value 0, the padding included (the input gradient's accumulator).
  void zero() { std::fill(data_.begin(), data_.end(), T{}); }

  // Tap (ki, kj)'s run for output row 0; row oy is oy * row_step() further.
  T* tap(int64_t ki, int64_t kj) {
    const int64_t xx = kj * p_.dil_w;
    return at(xx % p_.stride_w, ki * p_.dil_h, xx / p_.stride_w);
  }
  int64_t row_step() const { return p_.stride_h * cols_; }

 private:
  T* at(int64_t f, int64_t y, int64_t j) { return data_.data() + (f * rows_ + y) * cols_ + j; }
  const T* at(int64_t f, int64_t y, int64_t j) const { return data_.data() + (f * rows_ + y) * cols_ + j; }
  int64_t first_inside(int64_t x0) const {
    return x0 >= 0 ? 0 : std::min(cols_, (-x0 + p_.stride_w - 1) / p_.stride_w);
  }
  int64_t end_inside(int64_t x0) const {
    const int64_t hi = std::min(cols_, (g_.w - x0 + p_.stride_w - 1) / p_.stride_w);
    return std::max(first_inside(x0), hi);
  }

  Geometry g_;
  Conv2dParams p_;
  int64_t rows_, cols_;
  std::vector<T> data_;
};

using PhasePlane = PhasePlaneOf<float>;

}  // namespace qat::conv_detail
