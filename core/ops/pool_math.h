#pragma once
// The per-index bodies of the pooling ops (core/ops/pool.h), shared by the
// CPU op and its CUDA twin (core/ops/pool.cu): each computes one output (or,
// for a backward, one input gradient) from its flat index. The CPU forward
// loops of the average pools call them; max_pool2d's CPU forward (vectorised)
// and the CPU backwards (scatters) are separate code that the [math] tests
// compare with these bodies bit for bit.
//
// Note [pool backward as a gather]: the CPU backwards scatter each output's
// gradient into its window (+=); the device computes each input's gradient
// on its own thread by summing, over the outputs whose window holds it, in
// the order the scatter visits them (row-major over outputs), starting from
// 0. Same additions in the same order: the same bits, no atomics, no races.
#include <cstdint>

#include "core/host_device.h"
#include "core/ops/math.h"
#include "core/window.h"

namespace qat::op_math {

// The outputs [first, last] along one axis whose window holds a position
// (empty when first > last).
struct OutputRange {
  int64_t first, last;
};

// Sliding windows [o*stride - pad, o*stride - pad + kernel) over `out` outputs:
// those that hold input position t.
QAT_HOST_DEVICE inline OutputRange sliding_windows_holding(int64_t t, int64_t kernel, int64_t stride, int64_t pad,
                                                           int64_t out) {
  const int64_t lowest = t + pad - kernel + 1;  // o * stride >= lowest
  const int64_t first = lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  const int64_t highest = (t + pad) / stride;  // o * stride <= t + pad, t + pad >= 0
  return {first, highest < out - 1 ? highest : out - 1};
}

// Adaptive windows [floor(o in / out), ceil((o + 1) in / out)) (core/window.h):
// those that hold t. o's window starts at or before t when o in < (t + 1) out,
// and ends after t when (o + 1) in > t out, i.e. o >= floor(t out / in).
QAT_HOST_DEVICE inline OutputRange adaptive_windows_holding(int64_t t, int64_t in, int64_t out) {
  const int64_t last = ((t + 1) * out - 1) / in;
  return {t * out / in, last < out - 1 ? last : out - 1};
}

// One plane geometry of a pool: input H x W, output OH x OW.
struct PlaneSizes {
  int64_t H, W, OH, OW;
};

// ---------------------------------------------------------------- max pool

struct MaxPoolGeometry {
  PlaneSizes s;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};
inline MaxPoolGeometry max_pool_geometry(PlaneSizes s, const Pool2dParams& p) {
  return {s, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}

// Output i of max_pool2d (flat over planes x OH x OW): the window maximum;
// *arg = its index within the input plane. Padding is -inf, i.e. only the
// window's positions inside the plane count; the first maximum in row-major
// order wins ties (so +0 and -0 keep the first seen), and a NaN wins and
// stays (PyTorch's rule). A window with no position inside the plane (not
// possible with pad <= kernel / 2) gives 0 and -1.
QAT_HOST_DEVICE inline float max_pool_forward_at(int64_t i, const float* x, const MaxPoolGeometry& g, int32_t* arg) {
  const int64_t ohw = g.s.OH * g.s.OW, plane = i / ohw, oy = (i % ohw) / g.s.OW, ox = i % g.s.OW;
  const float* xp = x + plane * g.s.H * g.s.W;
  const int64_t y_start = oy * g.stride_h - g.pad_h, x_start = ox * g.stride_w - g.pad_w;
  const int64_t y0 = y_start > 0 ? y_start : 0, x0 = x_start > 0 ? x_start : 0;
  const int64_t y1 = y_start + g.kernel_h < g.s.H ? y_start + g.kernel_h : g.s.H;
  const int64_t x1 = x_start + g.kernel_w < g.s.W ? x_start + g.kernel_w : g.s.W;
  float best = 0.f;
  int32_t at = -1;
  for (int64_t iy = y0; iy < y1; ++iy)
    for (int64_t ix = x0; ix < x1; ++ix) {
      const float v = xp[iy * g.s.W + ix];
      if (at < 0 || v > best || (v != v && best == best)) {
        best = v;
        at = static_cast<int32_t>(iy * g.s.W + ix);
      }
    }
  *arg = at;
  return best;
}

// Input j's gradient (flat over planes x H x W): the sum of the gradients of
// the outputs whose argmax is j, in row-major order of the outputs (Note
// [pool backward as a gather]).
QAT_HOST_DEVICE inline float max_pool_backward_at(int64_t j, const float* grad_out, const int32_t* argmax,
                                                  const MaxPoolGeometry& g) {
  const int64_t hw = g.s.H * g.s.W, plane = j / hw, iy = (j % hw) / g.s.W, ix = j % g.s.W;
  const int64_t ohw = g.s.OH * g.s.OW;
  const int32_t* ap = argmax + plane * ohw;
  const float* gp = grad_out + plane * ohw;
  const int32_t here = static_cast<int32_t>(iy * g.s.W + ix);
  const OutputRange ry = sliding_windows_holding(iy, g.kernel_h, g.stride_h, g.pad_h, g.s.OH);
  const OutputRange rx = sliding_windows_holding(ix, g.kernel_w, g.stride_w, g.pad_w, g.s.OW);
  float acc = 0.f;
  for (int64_t oy = ry.first; oy <= ry.last; ++oy)
    for (int64_t ox = rx.first; ox <= rx.last; ++ox)
      if (ap[oy * g.s.OW + ox] == here) acc += gp[oy * g.s.OW + ox];
  return acc;
}

// ---------------------------------------------------------------- average pools

// The window [y0, y1) x [x0, x1) of one output (inside the plane) and the
// reciprocal of its divisor.
struct AvgWindow {
  int64_t y0, y1, x0, x1;
  float inv_count;
};

// avg_pool2d's windows: kernel/stride/padding; with count_include_pad the
// divisor counts the padded positions of the window (up to H + pad, W + pad,
// as PyTorch), else only those inside the plane.
struct SlidingAvgWindows {
  PlaneSizes s;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  bool count_include_pad;

  QAT_HOST_DEVICE AvgWindow operator()(int64_t oy, int64_t ox) const {
    int64_t y0 = oy * stride_h - pad_h, x0 = ox * stride_w - pad_w;
    int64_t y1 = y0 + kernel_h < s.H + pad_h ? y0 + kernel_h : s.H + pad_h;
    int64_t x1 = x0 + kernel_w < s.W + pad_w ? x0 + kernel_w : s.W + pad_w;
    const int64_t padded_count = (y1 - y0) * (x1 - x0);
    y0 = y0 > 0 ? y0 : 0, x0 = x0 > 0 ? x0 : 0;
    y1 = y1 < s.H ? y1 : s.H, x1 = x1 < s.W ? x1 : s.W;
    const int64_t count = count_include_pad ? padded_count : (y1 - y0) * (x1 - x0);
    return {y0, y1, x0, x1, 1.f / static_cast<float>(count)};
  }
  QAT_HOST_DEVICE OutputRange rows_holding(int64_t iy) const {
    return sliding_windows_holding(iy, kernel_h, stride_h, pad_h, s.OH);
  }
  QAT_HOST_DEVICE OutputRange cols_holding(int64_t ix) const {
    return sliding_windows_holding(ix, kernel_w, stride_w, pad_w, s.OW);
  }
};

inline SlidingAvgWindows avg_pool_windows(PlaneSizes s, const Pool2dParams& p, bool count_include_pad) {
  return {s, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, count_include_pad};
}

// adaptive_avg_pool2d's windows (PyTorch's rule, core/window.h), OH > H and
// OW > W included (windows then overlap).
struct AdaptiveAvgWindows {
  PlaneSizes s;

  QAT_HOST_DEVICE AvgWindow operator()(int64_t oy, int64_t ox) const {
    const AdaptiveWindow y = adaptive_window(oy, s.H, s.OH), x = adaptive_window(ox, s.W, s.OW);
    return {y.begin, y.end, x.begin, x.end, 1.f / static_cast<float>(y.size() * x.size())};
  }
  QAT_HOST_DEVICE OutputRange rows_holding(int64_t iy) const { return adaptive_windows_holding(iy, s.H, s.OH); }
  QAT_HOST_DEVICE OutputRange cols_holding(int64_t ix) const { return adaptive_windows_holding(ix, s.W, s.OW); }
};

// Output i of an average pool (flat over planes x OH x OW): the window's sum
// in row-major order, times 1/count (one product, last: nothing to fuse).
// window_average over one window w of the plane xp (row length W).
QAT_HOST_DEVICE inline float window_average(const float* xp, int64_t W, const AvgWindow& w) {
  float acc = 0.f;
  for (int64_t iy = w.y0; iy < w.y1; ++iy)
    for (int64_t ix = w.x0; ix < w.x1; ++ix) acc += xp[iy * W + ix];
  return acc * w.inv_count;
}

template <class Windows>
QAT_HOST_DEVICE inline float window_average_at(int64_t i, const float* x, const Windows& windows) {
  const PlaneSizes& s = windows.s;
  const int64_t ohw = s.OH * s.OW, plane = i / ohw, oy = (i % ohw) / s.OW, ox = i % s.OW;
  return window_average(x + plane * s.H * s.W, s.W, windows(oy, ox));
}

// One output's share of its gradient added into an input's: g / count
// (Note [pinned fused multiply-add]; the CPU scatter adds with this too).
QAT_HOST_DEVICE inline float add_window_share(float acc, float grad_out, float inv_count) {
  return mul_add(grad_out, inv_count, acc);
}

// Input j's gradient (flat over planes x H x W): the shares of every output
// whose window holds it, in row-major order of the outputs (Note [pool
// backward as a gather]). The candidate ranges may be wider than needed:
// each window is checked.
template <class Windows>
QAT_HOST_DEVICE inline float window_average_backward_at(int64_t j, const float* grad_out, const Windows& windows) {
  const PlaneSizes& s = windows.s;
  const int64_t hw = s.H * s.W, plane = j / hw, iy = (j % hw) / s.W, ix = j % s.W;
  const float* gp = grad_out + plane * s.OH * s.OW;
  const OutputRange ry = windows.rows_holding(iy), rx = windows.cols_holding(ix);
  float acc = 0.f;
  for (int64_t oy = ry.first; oy <= ry.last; ++oy)
    for (int64_t ox = rx.first; ox <= rx.last; ++ox) {
      const AvgWindow w = windows(oy, ox);
      if (iy >= w.y0 && iy < w.y1 && ix >= w.x0 && ix < w.x1)
        acc = add_window_share(acc, gp[oy * s.OW + ox], w.inv_count);
    }
  return acc;
}

}  // namespace qat::op_math
