// INT8 training's depthwise layers on the CPU: the sums of int8_math.h's
// per-index bodies (Note [INT8 training of depthwise layers]) as plane loops
// on the OpenMP threads, with the constants computed as the dense layers
// compute them.
//
// Note [INT8 training of depthwise layers]
// A depthwise convolution (groups = C = O, one KH x KW window per channel)
// has K = KH KW products per output: its three GEMMs of Note [INT8 training
// GEMMs] are per-channel dot products, which a dense GEMM would run on a
// block-diagonal weight C times larger. They run as per-index bodies
// (int8_math.h: DepthwiseForward, DepthwiseWeightGrad, DepthwiseInputGrad)
// for every executor (int8_device.h), and as plane loops on the CPU, on the
// same integers and with the same double expressions as the dense layers,
// so every value is again one rounding of the exact result:
//   forward   Y[n][c][p]  = float(s_x s_w[c] (sum_t u W[c][t] - zx sum_t W[c][t])) + b[c]
//   weight    dWq[c][t]   = float(s_G s_x (sum_(n,p) G[c][m] (u - 128) + (128 - zx) gsum[c]))
//   input     dXq[n][c][y][x] = float(s_Gx sum G_x[m][c] W[c][t]) over the (position, tap)
//             pairs whose window reads that pixel
// (t a tap (ki, kj), m = (n, p), u the input integer the tap reads, zx
// where it reads the padding). The sums are exact in int32 (forward: at most
// KH KW 255 128) and int64 (the gradients). The gradient quantization and
// the clips are the dense layers' (they see only dY and s_w).
//
// On the CPU the bodies' sums run as Note [depthwise kernel]'s plane loops
// (core/ops/depthwise_conv.cpp) on int32 planes (PhasePlaneOf): each (image,
// channel) plane loaded once with its padding, each tap a contiguous run per
// output row, no index arithmetic per product. The forward runs the float
// kernel itself on planes of u - z where that is exact (Note [exact float
// depthwise sums] below). The sums are of integers, so their order does not
// matter: each equals the body's, and the output is the same double
// expression of it (the device twin's test holds the two equal).
#include <vector>

#include <cmath>

#include "core/ops/conv_plane.h"
#include "core/ops/depthwise_conv.h"
#include "core/profiler.h"
#include "quant/int8_training/int8_cpu.h"

namespace qat::quant::int8_cpu {

namespace {

conv_detail::Geometry plane_geometry(const Geom& g) { return {g.n, g.c, g.h, g.w, g.c, g.kh, g.kw, g.oh, g.ow, g.c}; }
Conv2dParams plane_params(const Geom& g) {
  return {g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w, g.c};
}

using IntPlane = conv_detail::PhasePlaneOf<int32_t>;

// acc (OH x OW) = sum over taps of w[t] times tap t's windows.
void forward_plane(IntPlane& plane, const int8_t* w, const Geom& g, int32_t* acc) {
  std::fill(acc, acc + g.P(), 0);
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int32_t wt = w[ki * g.kw + kj];
      const int32_t* run = plane.tap(ki, kj);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        int32_t* out = acc + oy * g.ow;
        const int32_t* in = run + oy * plane.row_step();
#pragma omp simd
        for (int64_t ox = 0; ox < g.ow; ++ox) out[ox] += wt * in[ox];
      }
    }
}

// sums[t] += sum over the plane of gy (OH x OW) times tap t's windows: down
// the rows into OW int32 lanes (|lane| <= OH 128 128), then across in int64.
void weight_grad_plane(IntPlane& plane, const int32_t* gy, const Geom& g, int32_t* lanes, int64_t* sums) {
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int32_t* run = plane.tap(ki, kj);
      std::fill(lanes, lanes + g.ow, 0);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int32_t* gr = gy + oy * g.ow;
        const int32_t* in = run + oy * plane.row_step();
#pragma omp simd
        for (int64_t ox = 0; ox < g.ow; ++ox) lanes[ox] += gr[ox] * in[ox];
      }
      int64_t s = 0;
      for (int64_t ox = 0; ox < g.ow; ++ox) s += lanes[ox];
      sums[ki * g.kw + kj] += s;
    }
}

// The plane += w[t] times gy (OH x OW) spread over tap t's windows.
void input_grad_plane(IntPlane& plane, const int8_t* w, const int32_t* gy, const Geom& g) {
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int32_t wt = w[ki * g.kw + kj];
      int32_t* run = plane.tap(ki, kj);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        int32_t* out = run + oy * plane.row_step();
        const int32_t* gr = gy + oy * g.ow;
#pragma omp simd
        for (int64_t ox = 0; ox < g.ow; ++ox) out[ox] += wt * gr[ox];
      }
    }
}

}  // namespace

namespace {

// The output from planes of (u - z) as floats, summed by the float forward's
// kernel; each plane's sums dequantized while in cache. make_load() makes
// each thread's loader: load(n, c, plane) fills the plane of image n,
// channel c (a thread's (n, c) pairs come in order).
template <class MakeLoad>
void forward_float(const ActGrid& grid, const QuantCodes& wi, const float* pb, const Geom& g, float* py,
                   const MakeLoad& make_load) {
  const int64_t P = g.P(), K = g.K();
  std::vector<float> wf(static_cast<size_t>(g.c * K));
  for (int64_t i = 0; i < g.c * K; ++i) wf[i] = static_cast<float>(wi.q.get()[i]);
  const conv_detail::Geometry pg = plane_geometry(g);
#pragma omp parallel
  {
    conv_detail::PhasePlane plane(pg, plane_params(g), 0.f);
    auto load = make_load();
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c) {
        load(n, c, plane);
        float* out = py + (n * g.c + c) * P;
        conv_detail::depthwise_forward_plane(plane, wf.data() + c * K, 0.f, pg, out);
        const double s = static_cast<double>(grid.scale) * static_cast<double>(wi.scale[c]);
        const float b = pb ? pb[c] : 0.f;
#pragma omp simd
        for (int64_t p = 0; p < P; ++p) out[p] = static_cast<float>(s * static_cast<double>(out[p])) + b;
      }
  }
}

// The same output from the int32 planes (any zero point and size).
void forward_int(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const QuantCodes& wi,
                 const float* pb, const Geom& g, float* py) {
  const int64_t P = g.P(), K = g.K(), HW = g.h * g.w;
#pragma omp parallel
  {
    IntPlane plane(plane_geometry(g), plane_params(g), pad);
    std::vector<int32_t> acc(static_cast<size_t>(P));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c) {
        plane.load(u.data() + (n * g.c + c) * HW, [](uint8_t v) { return int32_t{v}; });
        forward_plane(plane, wi.q.get() + c * K, g, acc.data());
        const double s = static_cast<double>(grid.scale) * static_cast<double>(wi.scale[c]);
        const double corr = grid.zero * static_cast<double>(wi.rowsum[c]);
        float* out = py + (n * g.c + c) * P;
        for (int64_t p = 0; p < P; ++p)
          out[p] = static_cast<float>(s * (static_cast<double>(acc[p]) - corr)) + (pb ? pb[c] : 0.f);
      }
  }
}

}  // namespace

// Note [exact float depthwise sums]: where the input's zero point z is an
// integer, each product (u - z) W[c][t] is an integer of magnitude at most
// 255 * 128, and with at most 514 taps every partial sum stays below 2^24:
// float arithmetic (the float forward's plane kernel, FMA or not) computes
// sum_t (u - z) W exactly, which is acc - z sum_t W, the same integer the
// int32 planes give. The padding, the integer z, becomes 0. The float kernel
// runs its rows as whole vectors of constant width, where the int32 planes
// take two instructions a product.
bool depthwise_sums_in_float(const ActGrid& grid, const Geom& g) {
  return grid.zero == std::nearbyint(grid.zero) && grid.zero >= 0.0 && grid.zero <= 255.0 && g.K() <= 514;
}

// DepthwiseForward's expression: s_x s_w[c] (acc - z sum_t W[c][t]) + b[c]
// (acc - z sum_t W is exact either way, so both give the same floats).
Tensor depthwise_forward(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const QuantCodes& wi,
                         const Tensor& bias, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_forward");
  Tensor y = Tensor::empty({g.n, g.c, g.oh, g.ow});
  float* py = y.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  if (depthwise_sums_in_float(grid, g)) {
    const auto z = static_cast<int32_t>(grid.zero);
    forward_float(grid, wi, pb, g, py, [&] {
      return [&](int64_t n, int64_t c, conv_detail::PhasePlane& plane) {
        plane.load(u.data() + (n * g.c + c) * g.h * g.w,
                   [z](uint8_t v) { return static_cast<float>(int32_t{v} - z); });
      };
    });
  } else {
    forward_int(u, pad, grid, wi, pb, g, py);
  }
  return y;
}

Tensor depthwise_forward_of(const Tensor& x, const ActGrid& grid, const QuantCodes& wi, const Tensor& bias,
                            const Geom& g, const std::string& who) {
  QAT_PROFILE("int8_train.depthwise_forward");
  const int64_t HW = g.h * g.w;
  Tensor y = Tensor::empty({g.n, g.c, g.oh, g.ow});
  const float* px = x.data<float>();
  const InputRule rule(grid);
  int32_t off_grid = 0;
  // Each thread makes the integers of a run of planes at a time (at least
  // 4096 values: a plane of 4x4 alone would run the scalar tail of the
  // vectorised loop), then loads its planes from them.
  const int64_t planes = g.n * g.c, run = std::max<int64_t>(1, 4096 / HW);
  forward_float(grid, wi, bias.defined() ? bias.data<float>() : nullptr, g, y.data<float>(), [&] {
    return [&, v = std::vector<float>(static_cast<size_t>(run * HW)), first = int64_t{-1}](
               int64_t n, int64_t c, conv_detail::PhasePlane& plane) mutable {
      const int64_t at = n * g.c + c;
      if (first < 0 || at < first || at >= first + run) {
        first = at;
        const int64_t count = std::min(run, planes - at);
        if (centred_grid_codes(px + at * HW, count * HW, rule, v.data())) {
#pragma omp atomic
          off_grid |= 1;
        }
      }
      plane.load(v.data() + (at - first) * HW);
    };
  });
  if (off_grid) fail_first_off_grid(px, g.n * g.c * HW, grid, who);
  return y;
}

Tensor depthwise_weight_grad(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const int8_t* G,
                             const int64_t* gsum, float scale_g, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_weight_grad");
  const int64_t P = g.P(), K = g.K(), M = g.M(), HW = g.h * g.w;
  const double s = static_cast<double>(scale_g) * static_cast<double>(grid.scale);
  Tensor dw = Tensor::empty({g.c, K});
  float* pdw = dw.data<float>();
#pragma omp parallel
  {
    // The plane holds u - 128 (DepthwiseWeightGrad's B operand), its padding pad - 128.
    IntPlane plane(plane_geometry(g), plane_params(g), int32_t{pad} - 128);
    std::vector<int32_t> gy(static_cast<size_t>(P)), lanes(static_cast<size_t>(g.ow));
    std::vector<int64_t> sums(static_cast<size_t>(K));
#pragma omp for schedule(static)
    for (int64_t c = 0; c < g.c; ++c) {
      std::fill(sums.begin(), sums.end(), 0);
      for (int64_t n = 0; n < g.n; ++n) {
        plane.load(u.data() + (n * g.c + c) * HW, [](uint8_t v) { return int32_t{v} - 128; });
        const int8_t* gr = G + c * M + n * P;
        std::copy(gr, gr + P, gy.begin());
        weight_grad_plane(plane, gy.data(), g, lanes.data(), sums.data());
      }
      const double corr = (128.0 - grid.zero) * static_cast<double>(gsum[c]);
      for (int64_t t = 0; t < K; ++t) pdw[c * K + t] = static_cast<float>(s * (static_cast<double>(sums[t]) + corr));
    }
  }
  return dw;
}

Tensor depthwise_input_grad(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_input_grad");
  const int64_t P = g.P(), K = g.K(), HW = g.h * g.w, C = g.c;
  const double s = static_cast<double>(scale_gx);
  Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w});
  float* pdx = dx.data<float>();
#pragma omp parallel
  {
    IntPlane plane(plane_geometry(g), plane_params(g));
    std::vector<int32_t> gy(static_cast<size_t>(P));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t p = 0; p < P; ++p) gy[p] = Gx[(n * P + p) * C + c];  // Gx is (M, C)
        plane.zero();
        input_grad_plane(plane, wi.q.get() + c * K, gy.data(), g);
        plane.each_inside(pdx + (n * C + c) * HW,
                          [s](float& x, int32_t v) { x = static_cast<float>(s * static_cast<double>(v)); });
      }
  }
  return dx;
}

}  // namespace qat::quant::int8_cpu
