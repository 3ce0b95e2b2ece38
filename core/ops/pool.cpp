#include "core/ops/pool.h"

#include <cmath>
#include <limits>

#include "core/ops/common.h"
#include "core/ops/conv2d.h"

namespace qat {

namespace {

void check_pool_input(const Tensor& x, const char* op) {
  detail::check_f32(x, op, "input");
  QAT_CHECK(x.dim() == 4, op, ": expected input (N,C,H,W), got ", x.sizes());
}

void check_pool_params(const Pool2dParams& p, const char* op) {
  QAT_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1, op, ": kernel (", p.kernel_h,
            ",", p.kernel_w, ") and stride (", p.stride_h, ",", p.stride_w, ") must be >= 1");
  QAT_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
            ": padding (", p.pad_h, ",", p.pad_w, ") must be at most half the kernel (", p.kernel_h, ",", p.kernel_w,
            ")");
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  QAT_PROFILE("max_pool2d.forward");
  check_pool_input(x, "max_pool2d");
  check_pool_params(p, "max_pool2d");
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = conv_out_size(H, p.kernel_h, p.stride_h, p.pad_h, 1, "max_pool2d");
  const int64_t OW = conv_out_size(W, p.kernel_w, p.stride_w, p.pad_w, 1, "max_pool2d");
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty({N, C, OH, OW});
  Tensor idx = Tensor::empty({N, C, OH, OW}, DType::i32);
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  int32_t* pi = idx.data<int32_t>();
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const float* xp = px + plane * H * W;
    for (int64_t oy = 0; oy < OH; ++oy) {
      for (int64_t ox = 0; ox < OW; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t arg = -1;
        const int64_t y0 = oy * p.stride_h - p.pad_h, x0 = ox * p.stride_w - p.pad_w;
        for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
          const int64_t iy = y0 + ky;
          if (iy < 0 || iy >= H) continue;
          for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
            const int64_t ix = x0 + kx;
            if (ix < 0 || ix >= W) continue;
            const float v = xp[iy * W + ix];
            // NaN propagates (as PyTorch): a NaN wins and stays.
            if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              arg = static_cast<int32_t>(iy * W + ix);
            }
          }
        }
        const int64_t o = (plane * OH + oy) * OW + ox;
        po[o] = best;
        pi[o] = arg;
      }
    }
  }
  return record(out, "max_pool2d", {&x},
                [si = Saved(idx), in_shape = x.sizes()](const Tensor& g, const NeedGrad&) {
                  QAT_PROFILE("max_pool2d.backward");
                  const Tensor& id = si.get("max_pool2d");
                  Tensor gc = g.contiguous();
                  Tensor dx = Tensor::zeros(in_shape);
                  const int64_t planes = in_shape[0] * in_shape[1], HW = in_shape[2] * in_shape[3];
                  const int64_t OHW = id.size(2) * id.size(3);
                  const int32_t* pi = id.data<int32_t>();
                  const float* pg = gc.data<float>();
                  float* pd = dx.data<float>();
#pragma omp parallel for schedule(static)
                  for (int64_t plane = 0; plane < planes; ++plane)
                    for (int64_t o = 0; o < OHW; ++o) {
                      const int32_t a = pi[plane * OHW + o];
                      if (a >= 0) pd[plane * HW + a] += pg[plane * OHW + o];
                    }
                  return TensorList{dx};
                });
}

namespace {

// Shared by avg_pool2d and adaptive_avg_pool2d: each output averages a window
// [y0,y1) x [x0,x1) of its plane with a divisor.
struct Window {
  int64_t y0, y1, x0, x1;
  float inv_count;
};

template <class WindowFn>
Tensor window_average(const Tensor& x, int64_t OH, int64_t OW, const char* name, WindowFn win) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty({N, C, OH, OW});
  const float* px = xc.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const float* xp = px + plane * H * W;
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox) {
        const Window w = win(oy, ox);
        float acc = 0.f;
        for (int64_t iy = w.y0; iy < w.y1; ++iy)
          for (int64_t ix = w.x0; ix < w.x1; ++ix) acc += xp[iy * W + ix];
        po[(plane * OH + oy) * OW + ox] = acc * w.inv_count;
      }
  }
  return record(out, name, {&x}, [in_shape = x.sizes(), OH, OW, win](const Tensor& g, const NeedGrad&) {
    Tensor gc = g.contiguous();
    Tensor dx = Tensor::zeros(in_shape);
    const int64_t planes = in_shape[0] * in_shape[1], H = in_shape[2], W = in_shape[3];
    const float* pg = gc.data<float>();
    float* pd = dx.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < planes; ++plane)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          const Window w = win(oy, ox);
          const float v = pg[(plane * OH + oy) * OW + ox] * w.inv_count;
          for (int64_t iy = w.y0; iy < w.y1; ++iy)
            for (int64_t ix = w.x0; ix < w.x1; ++ix) pd[plane * H * W + iy * W + ix] += v;
        }
    return TensorList{dx};
  });
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p, bool count_include_pad) {
  QAT_PROFILE("avg_pool2d");
  check_pool_input(x, "avg_pool2d");
  check_pool_params(p, "avg_pool2d");
  const int64_t H = x.size(2), W = x.size(3);
  const int64_t OH = conv_out_size(H, p.kernel_h, p.stride_h, p.pad_h, 1, "avg_pool2d");
  const int64_t OW = conv_out_size(W, p.kernel_w, p.stride_w, p.pad_w, 1, "avg_pool2d");
  return window_average(x, OH, OW, "avg_pool2d", [=](int64_t oy, int64_t ox) {
    int64_t y0 = oy * p.stride_h - p.pad_h, x0 = ox * p.stride_w - p.pad_w;
    int64_t y1 = std::min(y0 + p.kernel_h, H + p.pad_h), x1 = std::min(x0 + p.kernel_w, W + p.pad_w);
    const int64_t padded_count = (y1 - y0) * (x1 - x0);
    y0 = std::max<int64_t>(y0, 0), x0 = std::max<int64_t>(x0, 0);
    y1 = std::min(y1, H), x1 = std::min(x1, W);
    const int64_t count = count_include_pad ? padded_count : (y1 - y0) * (x1 - x0);
    return Window{y0, y1, x0, x1, 1.f / static_cast<float>(count)};
  });
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  QAT_PROFILE("adaptive_avg_pool2d");
  check_pool_input(x, "adaptive_avg_pool2d");
  QAT_CHECK(out_h >= 1 && out_w >= 1, "adaptive_avg_pool2d: output size (", out_h, ",", out_w, ") must be >= 1");
  const int64_t H = x.size(2), W = x.size(3);
  QAT_CHECK(H >= 1 && W >= 1, "adaptive_avg_pool2d: empty input plane ", x.sizes());
  return window_average(x, out_h, out_w, "adaptive_avg_pool2d", [=](int64_t oy, int64_t ox) {
    const AdaptiveWindow y = adaptive_window(oy, H, out_h), x = adaptive_window(ox, W, out_w);
    return Window{y.begin, y.end, x.begin, x.end, 1.f / static_cast<float>(y.size() * x.size())};
  });
}

}  // namespace qat
