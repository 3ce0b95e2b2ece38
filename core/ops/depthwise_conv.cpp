#include "core/ops/depthwise_conv.h"

#include <type_traits>

// Note [depthwise kernel]
// Each (image, input channel) plane is loaded once into a zero-padded
// PhasePlane (core/ops/conv_plane.h), where tap (ki, kj)'s window for output
// row oy is a contiguous run of OW floats; out row oy += w[tap] * run (an
// axpy per tap and row), parallel over (image, channel) planes. The bias is
// added first, then the taps in (ki, kj) order. The backward is oneDNN's
// (Note [oneDNN convolutions]): with its reorders it took MobileNetV2's
// depthwise backward from 33 to 20 ms a step at 32 px (41 to 30 at 128 px),
// where its forward was slower than this one (9.5 against 11.4 ms).

namespace qat::conv_detail {

namespace {

// Rows of kW floats (kW = 0: g.ow, known at run time). MobileNetV2's maps
// at 32 px are 32, 16, 8 and 4 wide: with the width a constant each row
// operation is a few whole vectors, without a loop's prologue and tail,
// which took most of the time on the narrow maps. The same operations in
// the same order either way.
template <int kW>
int64_t row_width(const Geometry& g) {
  return kW ? kW : g.ow;
}

template <int kW>
void axpy(float* y, const float* x, float a, int64_t n) {
  if constexpr (kW != 0) n = kW;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

int64_t multiplier(const Geometry& g) { return g.o / g.c; }
int64_t taps(const Geometry& g) { return g.kh * g.kw; }

// out plane (OH x OW) = bias + the taps of w_oc over the loaded plane.
template <int kW>
void forward_plane(PhasePlane& plane, const float* w_oc, float bias, const Geometry& g, float* out) {
  const int64_t ow = row_width<kW>(g);
  std::fill(out, out + g.p(), bias);
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const float wt = w_oc[ki * g.kw + kj];
      const float* run = plane.tap(ki, kj);
      for (int64_t oy = 0; oy < g.oh; ++oy) axpy<kW>(out + oy * ow, run + oy * plane.row_step(), wt, ow);
    }
}

// f(std::integral_constant<int, W>) with W = ow where it is 4, 8, 16 or 32, else 0.
template <class F>
void with_row_width(int64_t ow, const F& f) {
  switch (ow) {
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    default:
      return f(std::integral_constant<int, 0>{});
  }
}

}  // namespace

bool is_depthwise(const Geometry& g) { return g.groups > 1 && g.groups == g.c && g.o % g.c == 0; }

void depthwise_forward(const float* x, const float* w, const float* b, const Geometry& g, const Conv2dParams& p,
                       float* out) {
  const int64_t m = multiplier(g), T = taps(g), P = g.p();
#pragma omp parallel
  {
    PhasePlane plane(g, p);
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c) {
        plane.load(x + (n * g.c + c) * g.h * g.w);
        with_row_width(g.ow, [&](auto kW) {
          for (int64_t j = 0; j < m; ++j) {
            const int64_t oc = c * m + j;
            forward_plane<kW>(plane, w + oc * T, b ? b[oc] : 0.f, g, out + (n * g.o + oc) * P);
          }
        });
      }
  }
}

void depthwise_forward_plane(PhasePlane& plane, const float* w_oc, float bias, const Geometry& g, float* out) {
  with_row_width(g.ow, [&](auto kW) { forward_plane<kW>(plane, w_oc, bias, g, out); });
}

}  // namespace qat::conv_detail
