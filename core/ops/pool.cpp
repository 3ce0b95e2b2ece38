#include "core/ops/pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/cpu_features.h"
#include "core/ops/common.h"
#include "core/ops/conv2d.h"
#include "core/ops/pool_math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

namespace {

void check_pool_params(const Pool2dParams& p, const char* op) {
  QAT_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1, op, ": kernel (", p.kernel_h,
            ",", p.kernel_w, ") and stride (", p.stride_h, ",", p.stride_w, ") must be >= 1");
  QAT_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
            ": padding (", p.pad_h, ",", p.pad_w, ") must be at most half the kernel (", p.kernel_h, ",", p.kernel_w,
            ")");
}

// One tap of stride-2 outputs j in [0, n) (value r[2 j], index base + 2 j)
// against best and arg, sixteen at a time: the even floats of 32 contiguous
// ones picked by one permute, the row loop's selects on lanes. The last
// block's loads are masked to the floats the tap reads (r[2 n - 2] is its
// last), so nothing past them is touched.
__attribute__((target("avx512f"))) void max_pool_tap_s2_avx512(const float* r, int32_t base, int64_t n, float* best,
                                                              int32_t* arg) {
  // 2 lane: the permute's picks (the even floats of the pair of loads), and each lane's index offset
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t outs = std::min<int64_t>(16, n - j), floats = 2 * outs - 1;  // (r[2 j] .. r[2 (j + outs - 1)])
    const auto first = [](int64_t k) { return static_cast<__mmask16>(k >= 16 ? 0xFFFF : (1u << k) - 1); };
    const __mmask16 live = first(outs);
    const __m512 lo = _mm512_maskz_loadu_ps(first(floats), r + 2 * j);
    const __m512 hi = _mm512_maskz_loadu_ps(first(std::max<int64_t>(0, floats - 16)), r + 2 * j + 16);
    const __m512 v = _mm512_permutex2var_ps(lo, even, hi);
    const __m512 b = _mm512_maskz_loadu_ps(live, best + j);
    const __mmask16 take = live & (_mm512_cmp_ps_mask(v, b, _CMP_GT_OQ) |
                                   (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(b, b, _CMP_ORD_Q)));
    _mm512_mask_storeu_ps(best + j, take, v);
    const __m512i at = _mm512_add_epi32(_mm512_set1_epi32(base + static_cast<int32_t>(2 * j)), even);
    _mm512_mask_storeu_epi32(arg + j, take, at);
  }
}

// One output row of one plane: best[ox] = the window maximum, arg[ox] its
// index in the plane (the first in row-major order among equal maxima; a NaN
// wins and stays, as in PyTorch). The window rows [y0, y1) are already
// clipped to the plane; columns are clipped per output at the edges only,
// and the interior runs tap by tap over all its outputs with selects instead
// of branches (vectorisable).
void max_pool_row(const float* xp, int64_t W, int64_t y0, int64_t y1, const Pool2dParams& p, int64_t OW, float* best,
                  int32_t* arg) {
  // interior outputs [lo, hi): every tap inside the row
  const int64_t lo = std::min(OW, (p.pad_w + p.stride_w - 1) / p.stride_w);
  const int64_t hi = std::max(lo, std::min(OW, (W + p.pad_w - p.kernel_w) / p.stride_w + 1));
  auto edge = [&](int64_t ox) {
    float b = 0.f;
    int32_t a = -1;
    for (int64_t iy = y0; iy < y1; ++iy)
      for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
        const int64_t ix = ox * p.stride_w - p.pad_w + kx;
        if (ix < 0 || ix >= W) continue;
        const float v = xp[iy * W + ix];
        if (a < 0 || v > b || (std::isnan(v) && !std::isnan(b))) b = v, a = static_cast<int32_t>(iy * W + ix);
      }
    best[ox] = b;
    arg[ox] = a;
  };
  for (int64_t ox = 0; ox < lo; ++ox) edge(ox);
  for (int64_t ox = hi; ox < OW; ++ox) edge(ox);
  if (hi <= lo) return;
  const int64_t s = p.stride_w, x0 = lo * s - p.pad_w;
  for (int64_t ox = lo; ox < hi; ++ox) {  // the first tap
    best[ox] = xp[y0 * W + x0 + (ox - lo) * s];
    arg[ox] = static_cast<int32_t>(y0 * W + x0 + (ox - lo) * s);
  }
  for (int64_t iy = y0; iy < y1; ++iy)
    for (int64_t kx = iy == y0 ? 1 : 0; kx < p.kernel_w; ++kx) {
      const float* r = xp + iy * W + x0 + kx;
      const int32_t base = static_cast<int32_t>(iy * W + x0 + kx);
      if (s == 2 && cpu_has_avx512f()) {  // (ResNet's stem pool)
        max_pool_tap_s2_avx512(r, base, hi - lo, best + lo, arg + lo);
        continue;
      }
      for (int64_t j = 0; j < hi - lo; ++j) {
        const float v = r[j * s], b = best[lo + j];
        const bool take = v > b || (v != v && b == b);
        best[lo + j] = take ? v : b;
        arg[lo + j] = take ? base + static_cast<int32_t>(j * s) : arg[lo + j];
      }
    }
}

// Without padding every window lies inside the plane: a whole plane's
// outputs, 16 at a time, each tap one gather at base[i] + (ky W + kx)
// (base[i]: output i's window corner), taps in row-major order with the same
// selects as above. Rows of 3 to 15 outputs (AlexNet's pools) leave most
// lanes of a per-row loop idle; a plane of outputs does not.
__attribute__((target("avx512f"))) void max_pool_plane_avx512(const float* xp, int64_t W, const Pool2dParams& p,
                                                              const std::vector<int32_t>& base, float* best,
                                                              int32_t* arg) {
  const int64_t n = static_cast<int64_t>(base.size());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i corner = _mm512_maskz_loadu_epi32(m, base.data() + i);
    __m512 b = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, corner, xp, 4);
    __m512i a = corner;
    for (int64_t ky = 0; ky < p.kernel_h; ++ky)
      for (int64_t kx = ky == 0 ? 1 : 0; kx < p.kernel_w; ++kx) {
        const __m512i at = _mm512_add_epi32(corner, _mm512_set1_epi32(static_cast<int32_t>(ky * W + kx)));
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at, xp, 4);
        const __mmask16 take = _mm512_cmp_ps_mask(v, b, _CMP_GT_OQ) |
                               (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(b, b, _CMP_ORD_Q));
        b = _mm512_mask_mov_ps(b, take, v);
        a = _mm512_mask_mov_epi32(a, take, at);
      }
    _mm512_mask_storeu_ps(best + i, m, b);
    _mm512_mask_storeu_epi32(arg + i, m, a);
  }
}

// The same with AVX2, 8 outputs at a time: gathers under a lane mask, the
// selects as blends.
__attribute__((target("avx2"))) void max_pool_plane_avx2(const float* xp, int64_t W, const Pool2dParams& p,
                                                         const std::vector<int32_t>& base, float* best, int32_t* arg) {
  const int64_t n = static_cast<int64_t>(base.size());
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(std::min<int64_t>(n - i, 8))), lanes);
    const __m256 m = _mm256_castsi256_ps(live);
    const __m256i corner = _mm256_maskload_epi32(base.data() + i, live);
    __m256 b = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), xp, corner, m, 4);
    __m256 a = _mm256_castsi256_ps(corner);
    for (int64_t ky = 0; ky < p.kernel_h; ++ky)
      for (int64_t kx = ky == 0 ? 1 : 0; kx < p.kernel_w; ++kx) {
        const __m256i at = _mm256_add_epi32(corner, _mm256_set1_epi32(static_cast<int32_t>(ky * W + kx)));
        const __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), xp, at, m, 4);
        const __m256 take = _mm256_or_ps(
            _mm256_cmp_ps(v, b, _CMP_GT_OQ),
            _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_ORD_Q)));
        b = _mm256_blendv_ps(b, v, take);
        a = _mm256_blendv_ps(a, _mm256_castsi256_ps(at), take);
      }
    _mm256_maskstore_ps(best + i, live, b);
    _mm256_maskstore_epi32(arg + i, live, _mm256_castps_si256(a));
  }
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  QAT_PROFILE("max_pool2d.forward");
  detail::check_f32_dims_any_device(x, 4, "max_pool2d", "input (N,C,H,W)");
  check_pool_params(p, "max_pool2d");
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = conv_out_size(H, p.kernel_h, p.stride_h, p.pad_h, 1, "max_pool2d");
  const int64_t OW = conv_out_size(W, p.kernel_w, p.stride_w, p.pad_w, 1, "max_pool2d");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::max_pool2d(x, p);  // core/ops/pool.cu
#endif
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty({N, C, OH, OW});
  Tensor idx = Tensor::empty({N, C, OH, OW}, DType::i32);
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  int32_t* pi = idx.data<int32_t>();
  const bool avx512 = cpu_has_avx512f(), avx2 = !avx512 && cpu_has_avx2();
  // The plane kernels only where output rows are short (under 32): on wide
  // rows the row loop's lanes are full and its loads contiguous, and the
  // gathers lose (2 threads, 32 x 64 x 112 x 112, 2 x 2 stride 2: 27 ms
  // against 5). AlexNet's widest, 27 outputs at 224 px, still gains from
  // them in the model (its three pools: 8.7-9.2 ms a pass against 10.6-11.3
  // with rows), though not in a loop over one repeated input.
  if (p.pad_h == 0 && p.pad_w == 0 && OW < 32 && (avx512 || avx2)) {
    std::vector<int32_t> base(static_cast<size_t>(OH * OW));
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox)
        base[oy * OW + ox] = static_cast<int32_t>(oy * p.stride_h * W + ox * p.stride_w);
    const auto plane_fn = avx512 ? &max_pool_plane_avx512 : &max_pool_plane_avx2;
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < N * C; ++plane)
      plane_fn(px + plane * H * W, W, p, base, po + plane * OH * OW, pi + plane * OH * OW);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < N * C; ++plane)
      for (int64_t oy = 0; oy < OH; ++oy) {
        const int64_t y0 = std::max<int64_t>(0, oy * p.stride_h - p.pad_h);
        const int64_t y1 = std::min(H, oy * p.stride_h - p.pad_h + p.kernel_h);
        const int64_t o = (plane * OH + oy) * OW;
        max_pool_row(px + plane * H * W, W, y0, y1, p, OW, po + o, pi + o);
      }
  }
  return record(out, "max_pool2d", {&x}, [si = Saved(idx), in_shape = x.sizes()](const Tensor& g, const NeedGrad&) {
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
// of its plane (op_math::SlidingAvgWindows, AdaptiveAvgWindows). The forward
// is the per-output body the CUDA twin runs; the backward scatters each
// output's share into its window, the order the twin's gather reproduces
// (Note [pool backward as a gather], core/ops/pool_math.h).
template <class Windows>
Tensor window_average(const Tensor& x, const char* name, const Windows& windows) {
  Tensor xc = x.contiguous();
  const op_math::PlaneSizes s = windows.s;
  Tensor out = Tensor::empty({x.size(0), x.size(1), s.OH, s.OW});
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  // The windows once (the device body decodes them per output, with
  // divisions), then each plane's outputs with the device body's arithmetic.
  auto table = std::make_shared<std::vector<op_math::AvgWindow>>(static_cast<size_t>(s.OH * s.OW));
  for (int64_t oy = 0; oy < s.OH; ++oy)
    for (int64_t ox = 0; ox < s.OW; ++ox) (*table)[oy * s.OW + ox] = windows(oy, ox);
  const int64_t planes = x.size(0) * x.size(1), ohw = s.OH * s.OW;
#pragma omp parallel for schedule(static) if (out.numel() > detail::kParallelGrain)
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t i = 0; i < ohw; ++i)
      po[plane * ohw + i] = op_math::window_average(px + plane * s.H * s.W, s.W, (*table)[i]);
  return record(out, name, {&x}, [in_shape = x.sizes(), s, table](const Tensor& g, const NeedGrad&) {
    Tensor gc = g.contiguous();
    Tensor dx = Tensor::zeros(in_shape);
    const int64_t planes = in_shape[0] * in_shape[1];
    const float* pg = gc.data<float>();
    float* pd = dx.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < planes; ++plane)
      for (int64_t oy = 0; oy < s.OH; ++oy)
        for (int64_t ox = 0; ox < s.OW; ++ox) {
          const op_math::AvgWindow& w = (*table)[oy * s.OW + ox];
          const float go = pg[(plane * s.OH + oy) * s.OW + ox];
          for (int64_t iy = w.y0; iy < w.y1; ++iy)
            for (int64_t ix = w.x0; ix < w.x1; ++ix) {
              float& d = pd[plane * s.H * s.W + iy * s.W + ix];
              d = op_math::add_window_share(d, go, w.inv_count);
            }
        }
    return TensorList{dx};
  });
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p, bool count_include_pad) {
  QAT_PROFILE("avg_pool2d");
  detail::check_f32_dims_any_device(x, 4, "avg_pool2d", "input (N,C,H,W)");
  check_pool_params(p, "avg_pool2d");
  const int64_t H = x.size(2), W = x.size(3);
  const int64_t OH = conv_out_size(H, p.kernel_h, p.stride_h, p.pad_h, 1, "avg_pool2d");
  const int64_t OW = conv_out_size(W, p.kernel_w, p.stride_w, p.pad_w, 1, "avg_pool2d");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::avg_pool2d(x, p, count_include_pad);  // core/ops/pool.cu
#endif
  return window_average(x, "avg_pool2d", op_math::avg_pool_windows({H, W, OH, OW}, p, count_include_pad));
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  QAT_PROFILE("adaptive_avg_pool2d");
  detail::check_f32_dims_any_device(x, 4, "adaptive_avg_pool2d", "input (N,C,H,W)");
  QAT_CHECK(out_h >= 1 && out_w >= 1, "adaptive_avg_pool2d: output size (", out_h, ",", out_w, ") must be >= 1");
  const int64_t H = x.size(2), W = x.size(3);
  QAT_CHECK(H >= 1 && W >= 1, "adaptive_avg_pool2d: empty input plane ", x.sizes());
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::adaptive_avg_pool2d(x, out_h, out_w);  // core/ops/pool.cu
#endif
  return window_average(x, "adaptive_avg_pool2d", op_math::AdaptiveAvgWindows{{H, W, out_h, out_w}});
}

}  // namespace qat
