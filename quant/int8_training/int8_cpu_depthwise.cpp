// INT8 training's depthwise layers on the CPU (Note [INT8 training of
// depthwise layers]).
//
// Note [INT8 training of depthwise layers]
// A depthwise convolution (groups = C = O, one KH x KW window per channel)
// has K = KH KW products per output: its three GEMMs of Note [INT8 training
// GEMMs] are per-channel dot products, which a dense GEMM would run on a
// block-diagonal weight C times larger. They run as direct loops here, on
// the same integers and with the same double expressions as the dense
// layers, so every value is again one rounding of the exact result:
//   forward   Y[n][c][p]  = float(s_x s_w[c] (sum_t u W[c][t] - zx sum_t W[c][t])) + b[c]
//   weight    dWq[c][t]   = float(s_G s_x (sum_(n,p) G[c][m] (u - 128) + (128 - zx) gsum[c]))
//   input     dXq[n][c][y][x] = float(s_Gx sum G_x[m][c] W[c][t]) over the (position, tap)
//             pairs whose window reads that pixel
// (t a tap (ki, kj), m = (n, p), u the input integer the tap reads, zx
// where it reads the padding). The sums are exact in int32 (forward: at most
// KH KW 255 128) and int64 (the gradients). The gradient quantization and
// the clips are the dense layers' (they see only dY and s_w). CPU only: the
// device twin refuses a depthwise layer by name.
#include <vector>

#include "core/profiler.h"
#include "quant/int8_training/int8_cpu.h"

namespace qat::quant::int8_cpu {

namespace {

// The input integer tap (ki, kj) of output position (oy, ox) reads in
// channel plane `plane` (H x W), or the padding integer.
inline int32_t tap_value(const uint8_t* plane, const Geom& g, int64_t oy, int64_t ox, int64_t ki, int64_t kj,
                         uint8_t pad) {
  const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h, ix = ox * g.stride_w - g.pad_w + kj * g.dil_w;
  return iy < 0 || iy >= g.h || ix < 0 || ix >= g.w ? pad : plane[iy * g.w + ix];
}

}  // namespace

Tensor depthwise_forward(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const QuantCodes& wi,
                         const Tensor& bias, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_forward");
  const int64_t C = g.c, K = g.K(), P = g.P();
  Tensor y = Tensor::empty({g.n, C, g.oh, g.ow});
  float* py = y.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const uint8_t* plane = u.data() + (n * C + c) * g.h * g.w;
      const int8_t* w = wi.q.get() + c * K;
      const double s = static_cast<double>(grid.scale) * static_cast<double>(wi.scale[c]);
      const double corr = grid.zero * static_cast<double>(wi.rowsum[c]);
      const float b = pb ? pb[c] : 0.f;
      for (int64_t p = 0; p < P; ++p) {
        int32_t acc = 0;
        for (int64_t ki = 0; ki < g.kh; ++ki)
          for (int64_t kj = 0; kj < g.kw; ++kj)
            acc += tap_value(plane, g, p / g.ow, p % g.ow, ki, kj, pad) * int32_t{w[ki * g.kw + kj]};
        py[(n * C + c) * P + p] = static_cast<float>(s * (static_cast<double>(acc) - corr)) + b;
      }
    }
  return y;
}

Tensor depthwise_weight_grad(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const int8_t* G,
                             const int64_t* gsum, float scale_g, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_weight_grad");
  const int64_t C = g.c, K = g.K(), P = g.P(), M = g.M();
  Tensor dw = Tensor::empty({C, K});
  float* pd = dw.data<float>();
  const double s = static_cast<double>(scale_g) * static_cast<double>(grid.scale);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    std::vector<int64_t> acc(static_cast<size_t>(K), 0);
    for (int64_t n = 0; n < g.n; ++n) {
      const uint8_t* plane = u.data() + (n * C + c) * g.h * g.w;
      const int8_t* gc = G + c * M + n * P;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t gv = gc[p];
        if (gv == 0) continue;
        for (int64_t ki = 0; ki < g.kh; ++ki)
          for (int64_t kj = 0; kj < g.kw; ++kj)
            acc[ki * g.kw + kj] += gv * (tap_value(plane, g, p / g.ow, p % g.ow, ki, kj, pad) - 128);
      }
    }
    const double corr = (128.0 - grid.zero) * static_cast<double>(gsum[c]);
    for (int64_t t = 0; t < K; ++t) pd[c * K + t] = static_cast<float>(s * (static_cast<double>(acc[t]) + corr));
  }
  return dw;
}

Tensor depthwise_input_grad(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_input_grad");
  const int64_t C = g.c, K = g.K(), P = g.P();
  Tensor dx = Tensor::empty({g.n, C, g.h, g.w});
  float* pd = dx.data<float>();
  const double s = static_cast<double>(scale_gx);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < C; ++c) {
      std::vector<int64_t> sum(static_cast<size_t>(g.h * g.w), 0);
      const int8_t* w = wi.q.get() + c * K;
      for (int64_t p = 0; p < P; ++p) {  // scatter each output's taps (exact: the order does not matter)
        const int64_t gv = Gx[(n * P + p) * C + c];
        if (gv == 0) continue;
        const int64_t oy = p / g.ow, ox = p % g.ow;
        for (int64_t ki = 0; ki < g.kh; ++ki) {
          const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kj = 0; kj < g.kw; ++kj) {
            const int64_t ix = ox * g.stride_w - g.pad_w + kj * g.dil_w;
            if (ix >= 0 && ix < g.w) sum[iy * g.w + ix] += gv * w[ki * g.kw + kj];
          }
        }
      }
      float* out = pd + (n * C + c) * g.h * g.w;
      for (int64_t i = 0; i < g.h * g.w; ++i) out[i] = static_cast<float>(s * static_cast<double>(sum[i]));
    }
  return dx;
}

}  // namespace qat::quant::int8_cpu
