#include "core/ops/conv2d.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/blas.h"
#include "core/cpu_features.h"
#include "core/ops/common.h"
#include "core/ops/conv_plane.h"
#include "core/ops/depthwise_conv.h"
#include "core/threads.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

using conv_detail::Geometry;
using conv_detail::PhasePlane;
using detail::check_f32_any_device;

namespace {

Geometry check_and_measure(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  check_f32_any_device(x, "conv2d", "input");
  check_f32_any_device(w, "conv2d", "weight");
  QAT_CHECK(x.dim() == 4, "conv2d: expected input (N,C,H,W), got ", x.sizes());
  QAT_CHECK(w.dim() == 4, "conv2d: expected weight (O,C/groups,KH,KW), got ", w.sizes());
  QAT_CHECK(p.groups >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.dil_h >= 1 && p.dil_w >= 1 && p.pad_h >= 0 &&
                p.pad_w >= 0,
            "conv2d: invalid params stride (", p.stride_h, ",", p.stride_w, ") padding (", p.pad_h, ",", p.pad_w,
            ") dilation (", p.dil_h, ",", p.dil_w, ") groups ", p.groups);
  Geometry g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), 0, 0, p.groups};
  QAT_CHECK(g.c % g.groups == 0 && g.o % g.groups == 0, "conv2d: channels in ", g.c, " and out ", g.o,
            " must be divisible by groups ", g.groups);
  QAT_CHECK(w.size(1) == g.cg(), "conv2d: expected input with ", w.size(1) * g.groups, " channels for weight ",
            w.sizes(), " and groups ", g.groups, ", got input ", x.sizes());
  if (b.defined()) {
    check_f32_any_device(b, "conv2d", "bias");
    QAT_CHECK(b.dim() == 1 && b.size(0) == g.o, "conv2d: expected bias (", g.o, "), got ", b.sizes());
  }
  detail::check_same_device("conv2d", {{"input", &x}, {"weight", &w}, {"bias", &b}});
  g.oh = conv_out_size(g.h, g.kh, p.stride_h, p.pad_h, p.dil_h, "conv2d");
  g.ow = conv_out_size(g.w, g.kw, p.stride_w, p.pad_w, p.dil_w, "conv2d");
  return g;
}

bool is_pointwise(const Geometry& g, const Conv2dParams& p) {
  return g.kh == 1 && g.kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0 &&
         g.groups == 1;
}

// Note [1x1 convolutions]: a 1x1 convolution is one GEMM an image on the
// image itself (no im2col). An image of at least 512 positions is a GEMM
// wide enough for OpenBLAS's threads; smaller ones (MobileNetV2's 8x8 and
// 4x4 stages at 32 px: 64 and 16 columns) are mostly the threads' hand-off,
// so those run an image a thread, each GEMM single-threaded, the weight
// gradient summed per thread and then across threads in thread order. On
// one thread both are the same loop, in the same order.
bool images_on_threads(const Geometry& g) { return g.p() < 512 && g.n >= num_threads() && num_threads() > 1; }

// Per-thread weight-gradient sums (Note [1x1 convolutions], backward_chunked):
// thread 0 adds into dw itself, every other thread into a zeroed copy of its
// own, which add_parts then adds to dw in thread order (static schedules:
// the same sums every run). dw null: no weight gradient.
class ThreadWeightGrads {
 public:
  ThreadWeightGrads(float* dw, int64_t size, int threads) : dw_(dw), size_(size), parts_(static_cast<size_t>(threads)) {}
  // Where thread t (inside the parallel region) adds its sums.
  float* of_thread(int t) {
    if (!dw_ || t == 0) return dw_;
    parts_[t].assign(static_cast<size_t>(size_), 0.f);
    return parts_[t].data();
  }
  void add_parts() const {
    if (!dw_) return;
    for (const auto& part : parts_)
      if (!part.empty())
        for (int64_t i = 0; i < size_; ++i) dw_[i] += part[static_cast<size_t>(i)];
  }

 private:
  float* dw_;
  int64_t size_;
  std::vector<std::vector<float>> parts_;
};

// (Not on the threads: outside any parallel region, where each GEMM runs on
// OpenBLAS's threads; inside even a team of one it runs on one, measured.)
void pointwise_forward(const float* px, const float* pw, const Geometry& g, float* po) {
  const int64_t P = g.p();
  auto image = [&](int64_t n) {
    sgemm(false, false, g.o, P, g.c, 1.f, pw, g.c, px + n * g.c * P, P, 0.f, po + n * g.o * P, P);
  };
  if (!images_on_threads(g)) {
    for (int64_t n = 0; n < g.n; ++n) image(n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) image(n);
}

// One image's gradients: dW += gy x^T, dx = W^T gy.
void pointwise_image_backward(const float* gyn, const float* xn, const float* pw, const Geometry& g, float* dw,
                              float* dxn) {
  const int64_t P = g.p();
  if (dw) sgemm(false, true, g.o, g.c, P, 1.f, gyn, P, xn, P, 1.f, dw, g.c);
  if (dxn) sgemm(true, false, g.c, P, g.o, 1.f, pw, g.c, gyn, P, 0.f, dxn, P);
}

void pointwise_backward(const float* pgy, const float* px, const float* pw, const Geometry& g, float* pdw,
                        float* pdx) {
  const int64_t P = g.p();
  auto image = [&](int64_t n, float* dw) {
    pointwise_image_backward(pgy + n * g.o * P, px + n * g.c * P, pw, g, dw, pdx ? pdx + n * g.c * P : nullptr);
  };
  if (!images_on_threads(g)) {
    for (int64_t n = 0; n < g.n; ++n) image(n, pdw);
    return;
  }
  const int threads = num_threads();
  ThreadWeightGrads parts(pdw, g.o * g.c, threads);
#pragma omp parallel num_threads(threads)
  {
    float* dw = parts.of_thread(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) image(n, dw);
  }
  parts.add_parts();
}

// Images per chunk at most: GEMMs at least ~512 columns wide (a 7x7 output
// is 49 columns an image), columns at most ~4 MB.
int64_t max_images_per_chunk(const Geometry& g) {
  const int64_t P = std::max<int64_t>(g.p(), 1), K = std::max<int64_t>(g.k(), 1);
  const int64_t by_width = (512 + P - 1) / P, by_size = std::max<int64_t>(1, (int64_t{1} << 20) / (K * P));
  return std::max<int64_t>(1, std::min(by_width, by_size));
}

// The batch cut into chunks of images, as many as the threads or a multiple
// of them (but no more chunks than images), of sizes differing by at most
// one: chunks of at most 11 images were 11 + 11 + 10 for 32 images on two
// threads, so one thread did 22 and the other waited (AlexNet's conv3-5 at
// 128 px are half the step's FLOPs).
struct ChunkPlan {
  int64_t n = 0, chunks = 0;
  int64_t begin(int64_t i) const { return i * n / chunks; }
  int64_t count(int64_t i) const { return begin(i + 1) - begin(i); }
};

ChunkPlan plan_chunks(const Geometry& g, int threads) {
  const int64_t at_most = max_images_per_chunk(g), t = std::max(threads, 1);
  int64_t chunks = (g.n + at_most - 1) / at_most;
  chunks = std::min(g.n, (chunks + t - 1) / t * t);
  return {g.n, std::max<int64_t>(chunks, 1)};
}

// Reusable per-thread scratch buffers (columns can be tens of MB; reusing them
// avoids page-faulting a fresh allocation every call).
float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> bufs[2];
  if (static_cast<int64_t>(bufs[slot].size()) < n) bufs[slot].resize(static_cast<size_t>(n));
  return bufs[slot].data();
}



// d[0, n) = s[0, n), or += with Add; AVX-512 where the CPU has it (a masked
// tail instead of a call to memcpy for rows of 7 floats).
template <bool Add>
__attribute__((target("avx512f"))) void run_avx512(float* d, const float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(s + i);
    if constexpr (Add) v = _mm512_add_ps(_mm512_loadu_ps(d + i), v);
    _mm512_storeu_ps(d + i, v);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, s + i);
    if constexpr (Add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + i), v);
    _mm512_mask_storeu_ps(d + i, m, v);
  }
}

template <bool Add>
void run_generic(float* d, const float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = Add ? d[i] + s[i] : s[i];
}

using RunFn = void (*)(float*, const float*, int64_t);
template <bool Add>
RunFn run_kernel() {
  return cpu_has_avx512bw() ? &run_avx512<Add> : &run_generic<Add>;
}

// Every (image n < count, channel cl of a group) plane on the threads, each
// with this thread's phase plane: body(plane, n, cl).
template <class Body>
void each_plane(const Geometry& g, const Conv2dParams& p, int64_t count, Body body) {
#pragma omp parallel
  {
    PhasePlane plane(g, p);
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < count; ++n)
      for (int64_t cl = 0; cl < g.cg(); ++cl) body(plane, n, cl);
  }
}

// Each output row of each tap of channel cl: fn(the row's start in the
// plane, its offset in col (K, NP) from image n's first column).
template <class Fn>
void each_tap_row(PhasePlane& plane, const Geometry& g, int64_t cl, int64_t NP, Fn fn) {
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      float* tap = plane.tap(ki, kj);
      const int64_t k = (cl * g.kh + ki) * g.kw + kj;
      for (int64_t oy = 0; oy < g.oh; ++oy) fn(tap + oy * plane.row_step(), k * NP + oy * g.ow);
    }
}

// col (K, count*P) for group `gi` and images [n0, n0 + count): row r =
// (c, ki, kj), column = (n - n0)*P + oy*OW + ox.
void im2col(const float* x, const Geometry& g, const Conv2dParams& p, int64_t gi, float* col, int64_t n0,
            int64_t count) {
  const int64_t P = g.p(), NP = count * P;
  const RunFn copy = run_kernel<false>();
  each_plane(g, p, count, [&](PhasePlane& plane, int64_t n, int64_t cl) {
    plane.load(x + ((n0 + n) * g.c + gi * g.cg() + cl) * g.h * g.w);
    each_tap_row(plane, g, cl, NP, [&](float* row, int64_t at) { copy(col + at + n * P, row, g.ow); });
  });
}

// dx (+=) from dcol (K, count*P) for group gi and images [n0, n0 + count);
// each (n, c) plane is owned by one thread. The taps are summed in the
// padded plane in (ki, kj, oy) order, then added to dx.
void col2im(const float* dcol, const Geometry& g, const Conv2dParams& p, int64_t gi, float* dx, int64_t n0,
            int64_t count) {
  const int64_t P = g.p(), NP = count * P;
  const RunFn add = run_kernel<true>();
  each_plane(g, p, count, [&](PhasePlane& plane, int64_t n, int64_t cl) {
    plane.zero();
    each_tap_row(plane, g, cl, NP, [&](float* row, int64_t at) { add(row, dcol + at + n * P, g.ow); });
    plane.add_into(dx + ((n0 + n) * g.c + gi * g.cg() + cl) * g.h * g.w);
  });
}

// out[n0 + n, gi*Og + o, :] = y[o, n*P : (n+1)*P] (+ bias), n < count
void scatter_output(const float* y, const Geometry& g, int64_t gi, const float* bias, float* out, int64_t n0,
                    int64_t count) {
  const int64_t P = g.p(), Og = g.og();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < count; ++n) {
    for (int64_t o = 0; o < Og; ++o) {
      const int64_t oc = gi * Og + o;
      const float* src = y + o * count * P + n * P;
      float* dst = out + ((n0 + n) * g.o + oc) * P;
      const float b = bias ? bias[oc] : 0.f;
      for (int64_t i = 0; i < P; ++i) dst[i] = src[i] + b;
    }
  }
}

// gy'[o, n*P + i] = gy[n0 + n, gi*Og + o, i], n < count
void gather_grad(const float* gy, const Geometry& g, int64_t gi, float* dst, int64_t n0, int64_t count) {
  const int64_t P = g.p(), Og = g.og();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t o = 0; o < Og; ++o)
    for (int64_t n = 0; n < count; ++n)
      std::memcpy(dst + o * count * P + n * P, gy + ((n0 + n) * g.o + gi * Og + o) * P, sizeof(float) * P);
}

// The backward in the forward's chunks of images, each thread with its own
// columns: dX chunk by chunk (dcol = W^T gy, col2im into the chunk's planes),
// dW summed per thread (beta = 1 GEMMs; thread 0 straight into dW, which
// starts at zero) and the other threads' sums added in thread order (static
// chunk assignment: the same sums every run).
void backward_chunked(const float* pgy, const float* px, const float* pw, const Geometry& g, const Conv2dParams& p,
                      float* pdw, float* pdx) {
  const int64_t K = g.k(), P = g.p();
  const int threads = num_threads();
  const ChunkPlan plan = plan_chunks(g, threads);
  ThreadWeightGrads parts(pdw, g.o * K, threads);
#pragma omp parallel num_threads(threads)
  {
    float* dw = parts.of_thread(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < plan.chunks; ++i) {
      const int64_t n0 = plan.begin(i), count = plan.count(i), cnp = count * P;
      float* ccol = scratch(0, K * cnp);
      const float* gy = pgy + n0 * g.o * P;  // one image: (O, P) as it is
      if (count > 1) {
        float* gathered = scratch(1, g.o * cnp);
        gather_grad(pgy, g, 0, gathered, n0, count);
        gy = gathered;
      }
      if (dw) {
        im2col(px, g, p, 0, ccol, n0, count);
        sgemm(false, true, g.o, K, cnp, 1.f, gy, cnp, ccol, cnp, 1.f, dw, K);
      }
      if (pdx) {
        sgemm(true, false, K, cnp, g.o, 1.f, pw, K, gy, cnp, 0.f, ccol, cnp);
        col2im(ccol, g, p, 0, pdx, n0, count);
      }
    }
  }
  parts.add_parts();
}

bool use_chunks(const Geometry& g) {
  const int64_t chunk = max_images_per_chunk(g);
  return g.groups == 1 && (g.n + chunk - 1) / chunk >= num_threads();
}

Tensor forward_impl(const Tensor& xc, const Tensor& wc, const Tensor& bias, const Geometry& g, const Conv2dParams& p) {
  Tensor out = Tensor::empty({g.n, g.o, g.oh, g.ow});
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  const float* pb = bc.defined() ? bc.data<float>() : nullptr;
  const float* px = xc.data<float>();
  const float* pw = wc.data<float>();
  float* po = out.data<float>();
  const int64_t K = g.k(), P = g.p(), NP = g.n * P, Og = g.og();
  if (is_pointwise(g, p)) {
    QAT_PROFILE("1x1 (in conv2d.forward)");
    pointwise_forward(px, pw, g, po);
    if (pb) {
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t o = 0; o < g.o; ++o)
          for (int64_t i = 0; i < P; ++i) po[(n * g.o + o) * P + i] += pb[o];
    }
    return out;
  }
  if (conv_detail::is_depthwise(g)) {
    QAT_PROFILE("depthwise (in conv2d.forward)");
    conv_detail::depthwise_forward(px, pw, pb, g, p, po);
    return out;
  }
  if (use_chunks(g)) {
    const ChunkPlan plan = plan_chunks(g, num_threads());
    // Chunks of images on the threads, each with its own columns (which stay
    // in cache: the whole batch's are tens of MB through memory) and a
    // single-threaded GEMM (OpenBLAS inside a parallel region); a chunk of
    // one image needs no scatter.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < plan.chunks; ++i) {
      const int64_t n0 = plan.begin(i), count = plan.count(i), cnp = count * P;
      float* ccol = scratch(0, K * cnp);
      float* cy = count == 1 ? po + n0 * g.o * P : scratch(1, g.o * cnp);
      im2col(px, g, p, 0, ccol, n0, count);
      sgemm(false, false, g.o, cnp, K, 1.f, pw, K, ccol, cnp, 0.f, cy, cnp);
      if (count > 1 || pb) scatter_output(cy, g, 0, pb, po, n0, count);
    }
    return out;
  }
  float* col = scratch(0, K * NP);
  float* y = scratch(1, Og * NP);
  for (int64_t gi = 0; gi < g.groups; ++gi) {
    im2col(px, g, p, gi, col, 0, g.n);
    sgemm(false, false, Og, NP, K, 1.f, pw + gi * Og * K, K, col, NP, 0.f, y, NP);
    scatter_output(y, g, gi, pb, po, 0, g.n);
  }
  return out;
}

TensorList backward_impl(const Tensor& gy, const Tensor& xc, const Tensor& wc, const Geometry& g,
                         const Conv2dParams& p, const NeedGrad& need) {
  const int64_t K = g.k(), P = g.p(), NP = g.n * P, Og = g.og();
  Tensor gyc = gy.contiguous();
  const float* pgy = gyc.data<float>();
  TensorList r(3);
  if (need[2]) {
    r[2] = Tensor::zeros({g.o});
    float* db = r[2].data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < g.o; ++o) {
      double acc = 0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t i = 0; i < P; ++i) acc += pgy[(n * g.o + o) * P + i];
      db[o] = static_cast<float>(acc);
    }
  }
  if (!need[0] && !need[1]) return r;
  const float* px = xc.data<float>();
  const float* pw = wc.data<float>();
  float* pdx = nullptr;
  if (need[0]) {
    r[0] = Tensor::zeros(xc.sizes());
    pdx = r[0].data<float>();
  }
  float* pdw = nullptr;
  if (need[1]) {
    r[1] = Tensor::zeros(wc.sizes());
    pdw = r[1].data<float>();
  }
  if (is_pointwise(g, p)) {
    QAT_PROFILE("1x1 (in conv2d.backward)");
    pointwise_backward(pgy, px, pw, g, pdw, pdx);
    return r;
  }
  if (conv_detail::is_depthwise(g)) {
    QAT_PROFILE("depthwise (in conv2d.backward)");
    conv_detail::depthwise_backward(pgy, px, pw, g, p, pdx, pdw);
    return r;
  }
  if (use_chunks(g)) {
    backward_chunked(pgy, px, pw, g, p, pdw, pdx);
    return r;
  }
  float* col = scratch(0, K * NP);
  float* gyt = scratch(1, Og * NP);
  for (int64_t gi = 0; gi < g.groups; ++gi) {
    gather_grad(pgy, g, gi, gyt, 0, g.n);
    if (pdw) {
      im2col(px, g, p, gi, col, 0, g.n);
      sgemm(false, true, Og, K, NP, 1.f, gyt, NP, col, NP, 0.f, pdw + gi * Og * K, K);
    }
    if (pdx) {
      sgemm(true, false, K, NP, Og, 1.f, pw + gi * Og * K, K, gyt, NP, 0.f, col, NP);
      col2im(col, g, p, gi, pdx, 0, g.n);
    }
  }
  return r;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  QAT_PROFILE("conv2d.forward");
  const Geometry g = check_and_measure(x, weight, bias, p);
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::conv2d(x, weight, bias, p);  // core/ops/conv2d.cu
#endif
  Tensor xc = x.contiguous(), wc = weight.contiguous();
  Tensor out = forward_impl(xc, wc, bias, g, p);
  return record(out, "conv2d", {&x, &weight, &bias},
                [sx = Saved(xc), sw = Saved(wc), g, p](const Tensor& gy, const NeedGrad& need) {
                  QAT_PROFILE("conv2d.backward");
                  return backward_impl(gy, sx.get("conv2d"), sw.get("conv2d"), g, p, need);
                });
}

TensorList conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                           const NeedGrad& need) {
  QAT_PROFILE("conv2d.backward");
  const Geometry g = check_and_measure(x, weight, Tensor(), p);
  detail::check_gradient_device(gy, x.device(), "conv2d backward");
  QAT_CHECK(gy.sizes() == Shape({g.n, g.o, g.oh, g.ow}), "conv2d backward: expected a gradient ",
            Shape({g.n, g.o, g.oh, g.ow}), ", got ", gy.sizes());
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::conv2d_backward(gy, x, weight, p, need);  // core/ops/conv2d.cu
#endif
  return backward_impl(gy, x.contiguous(), weight.contiguous(), g, p, need);
}

}  // namespace qat
