#include "core/ops/depthwise_conv.h"

// Note [depthwise kernel]
// Each (image, input channel) plane is loaded once into a zero-padded
// PhasePlane (core/ops/conv_plane.h), where tap (ki, kj)'s window for output
// row oy is a contiguous run of OW floats. Then:
//   forward   out row oy += w[tap] * run          (an axpy per tap and row)
//   dx        run += w[tap] * gy row oy           (into a zeroed plane, then
//                                                  added back to dx)
//   dw[tap]   += sum of gy row oy * run           (float per image, down
//                                                  the rows then across,
//                                                  double across images)
// The forward and dx are parallel over (image, channel) planes, dw over
// channels (each thread owns its channels' sums, so every run adds in the
// same order). The bias is added first, then the taps in (ki, kj) order.

namespace qat::conv_detail {

namespace {

void axpy(float* y, const float* x, float a, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// y[i] += a[i] b[i]
void fma_rows(float* y, const float* a, const float* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a[i] * b[i];
}

int64_t multiplier(const Geometry& g) { return g.o / g.c; }
int64_t taps(const Geometry& g) { return g.kh * g.kw; }

// out plane (OH x OW) = bias + the taps of w_oc over the loaded plane.
void forward_plane(PhasePlane& plane, const float* w_oc, float bias, const Geometry& g, float* out) {
  std::fill(out, out + g.p(), bias);
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const float wt = w_oc[ki * g.kw + kj];
      const float* run = plane.tap(ki, kj);
      for (int64_t oy = 0; oy < g.oh; ++oy) axpy(out + oy * g.ow, run + oy * plane.row_step(), wt, g.ow);
    }
}

// The plane += the taps of w_oc spread by gy's plane.
void input_grad_plane(PhasePlane& plane, const float* w_oc, const float* gy, const Geometry& g) {
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const float wt = w_oc[ki * g.kw + kj];
      float* run = plane.tap(ki, kj);
      for (int64_t oy = 0; oy < g.oh; ++oy) axpy(run + oy * plane.row_step(), gy + oy * g.ow, wt, g.ow);
    }
}

// acc[tap] += the dot product of gy's plane with tap's windows: the
// products summed down the rows into `lanes` (OW floats, vectorized with no
// reduction across a row), then the lanes summed once per image.
void weight_grad_plane(PhasePlane& plane, const float* gy, const Geometry& g, float* lanes, double* acc) {
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const float* run = plane.tap(ki, kj);
      std::fill(lanes, lanes + g.ow, 0.f);
      for (int64_t oy = 0; oy < g.oh; ++oy) fma_rows(lanes, gy + oy * g.ow, run + oy * plane.row_step(), g.ow);
      float s = 0.f;
      for (int64_t i = 0; i < g.ow; ++i) s += lanes[i];
      acc[ki * g.kw + kj] += s;
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
        for (int64_t j = 0; j < m; ++j) {
          const int64_t oc = c * m + j;
          forward_plane(plane, w + oc * T, b ? b[oc] : 0.f, g, out + (n * g.o + oc) * P);
        }
      }
  }
}

void depthwise_backward(const float* gy, const float* x, const float* w, const Geometry& g, const Conv2dParams& p,
                        float* dx, float* dw) {
  const int64_t m = multiplier(g), T = taps(g), P = g.p(), HW = g.h * g.w;
  if (dx) {
#pragma omp parallel
    {
      PhasePlane plane(g, p);
#pragma omp for collapse(2) schedule(static)
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t c = 0; c < g.c; ++c) {
          plane.zero();
          for (int64_t j = 0; j < m; ++j) {
            const int64_t oc = c * m + j;
            input_grad_plane(plane, w + oc * T, gy + (n * g.o + oc) * P, g);
          }
          plane.add_into(dx + (n * g.c + c) * HW);
        }
    }
  }
  if (!dw) return;
#pragma omp parallel
  {
    PhasePlane plane(g, p);
    std::vector<double> acc(static_cast<size_t>(m * T));
    std::vector<float> lanes(static_cast<size_t>(g.ow));
#pragma omp for schedule(static)
    for (int64_t c = 0; c < g.c; ++c) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t n = 0; n < g.n; ++n) {
        plane.load(x + (n * g.c + c) * HW);
        for (int64_t j = 0; j < m; ++j) weight_grad_plane(plane, gy + (n * g.o + c * m + j) * P, g, lanes.data(), &acc[j * T]);
      }
      for (int64_t i = 0; i < m * T; ++i) dw[c * m * T + i] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
  }
}

}  // namespace qat::conv_detail
