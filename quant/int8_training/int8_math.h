#pragma once
// Per-element rules of INT8 training's integer layers (int8_ops.h, Note
// [INT8 training GEMMs]), shared by the CPU op (int8_ops.cpp) and its device
// twin (int8_device.h), so that the CPU tests cover the arithmetic both run.
//
// Note [INT8 training doubles]: every float result is one rounding of a
// double expression, and a product that a compiler could fuse with a
// following sum (GCC on the host, nvcc on the device) is either pinned (fma,
// stated) or computed by its own pass into memory (the per-channel products
// s_x s_w[o], z sum_k W and (128 - z) sum_m G), so the sums that read them
// have nothing to fuse.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "quant/int8_training/grad_quant.h"
#include "quant/integer/int_math.h"

namespace qat::quant::int8_math {

// A layer's geometry (a linear layer: h = w = kh = kw = 1, no padding;
// groups 1, or a depthwise convolution: groups = c = o, Note [INT8 training
// of depthwise layers]).
struct Geometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t groups = 1;
  QAT_HOST_DEVICE bool depthwise() const { return groups > 1; }
  QAT_HOST_DEVICE int64_t K() const { return c / groups * kh * kw; }
  QAT_HOST_DEVICE int64_t P() const { return oh * ow; }
  QAT_HOST_DEVICE int64_t M() const { return n * P(); }
};

// The integer u of an input value on the grid x = s (u - z): t = x / s + z as
// one fused multiply-add in double (x * inv + z), rounded; -1 where t is more
// than 1e-3 off that integer or outside [0, levels) (NaN included).
QAT_HOST_DEVICE inline int32_t input_integer(float x, double inv, double zero, int32_t levels) {
  const double t = fma(static_cast<double>(x), inv, zero);
  const double r = int_math::round_half_even(t);
  if (!(fabs(t - r) <= 1e-3) || r < 0 || r >= levels) return -1;
  return static_cast<int32_t>(r);
}

// The int8 W of a fake-quantized weight value wq = s W: nearbyint(wq * inv)
// (inv = 1 / s; wq * inv lands within a few ulps of W); *ok becomes false
// where that is more than 1e-3 off or outside [-128, 127] (NaN included),
// and W is then 0. The product and the difference are rounded each (GCC does
// not fuse a product that has another use, the nearbyint; on the device the
// round-to-nearest intrinsics say so).
QAT_HOST_DEVICE inline int8_t weight_code(float wq, float inv, bool* ok) {
#if defined(__CUDA_ARCH__)
  const float t = __fmul_rn(wq, inv);
  const float q = int_math::round_half_even(t);
  const float off = __fsub_rn(t, q);
#else
  const float t = wq * inv;
  const float q = int_math::round_half_even(t);
  const float off = t - q;
#endif
  const bool on_grid = fabsf(off) <= 1e-3f && q >= -128.f && q <= 127.f;
  *ok = *ok && on_grid;
  return on_grid ? static_cast<int8_t>(q) : int8_t{0};
}

// The cosine sums of one quantized gradient value (grad_quant.h,
// GradQuantStats): dot += v q, qq += q q, gg += v v, each one fused
// multiply-add in double.
QAT_HOST_DEVICE inline void add_grad_stats(double* dot, double* qq, double* gg, float v, int8_t q) {
  const double vd = v, qd = q;
  *dot = fma(vd, qd, *dot);
  *qq = fma(qd, qd, *qq);
  *gg = fma(vd, vd, *gg);
}

// Note [INT8 training sums in chunks]: each double sum of the backward over
// a row (G's cosine sums and the bias gradient per output channel, Gx's
// cosine sums per image) runs over chunks of kSumChunk consecutive elements
// of that row: every chunk summed in order from zero, the chunks' sums added
// in order from zero. The CPU op does exactly this in its loops; the device
// twin gives each (row, chunk) its own thread (thousands, where one thread
// per row would walk a row of 10^5 elements alone) and folds the chunks in
// order: the same additions, the same bits.
constexpr int64_t kSumChunk = 1024;
QAT_HOST_DEVICE inline int64_t sum_chunks(int64_t n) { return (n + kSumChunk - 1) / kSumChunk; }

// ---------------------------------------------------------------- operands
// Row m = (image n, output position p) of the input's patches, column k =
// (c, ki, kj), from the integers u of an NCHW input; `pad` outside.
struct NchwPatches {
  const uint8_t* u;
  Geometry g;
  uint8_t pad;
  QAT_HOST_DEVICE uint8_t at(int64_t m, int64_t k) const {
    const int64_t P = g.P(), n = m / P, p = m % P, taps = g.kh * g.kw;
    const int64_t c = k / taps, ki = (k % taps) / g.kw, kj = k % g.kw;
    const int64_t iy = (p / g.ow) * g.stride_h - g.pad_h + ki * g.dil_h;
    const int64_t ix = (p % g.ow) * g.stride_w - g.pad_w + kj * g.dil_w;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return pad;
    return u[((n * g.c + c) * g.h + iy) * g.w + ix];
  }
};

// The weight gradient's B operand: row k is column k of the patches, read as
// u - 128 along m.
struct PatchColumns {
  NchwPatches patches;
  QAT_HOST_DEVICE int8_t s8(int64_t k, int64_t m) const { return static_cast<int8_t>(patches.at(m, k) ^ 0x80u); }
};

// ---------------------------------------------------------------- output stages
// Forward: Y[n][o][p] = float(s[o] (acc - corr[o])) + b[o], acc = sum_k u W
// (the GEMM's dot of u - 128 plus 128 sum_k W), s[o] = s_x s_w[o] and
// corr[o] = z sum_k W from their own pass.
struct ForwardStage {
  using Acc = int32_t;
  const int64_t* rowsum;  // sum_k W[o][k]
  const double* s;
  const double* corr;
  const float* bias;  // or null
  float* y;
  int64_t channels, positions;
  QAT_HOST_DEVICE void operator()(int64_t r, int64_t o, int32_t dot) const {
    // |128 sum_k W| < 2^30 (K <= 2^16); the int32 sum wraps as the CPU's would
    const int32_t acc = static_cast<int32_t>(static_cast<uint32_t>(dot) + 128u * static_cast<uint32_t>(rowsum[o]));
    const float v = static_cast<float>(s[o] * (static_cast<double>(acc) - corr[o]));
    y[((r / positions) * channels + o) * positions + r % positions] = v + (bias ? bias[o] : 0.f);
  }
};

// Weight gradient: dW[o][k] = float(s (acc + corr[o])), acc = sum_m G (u - 128)
// (int64), corr[o] = (128 - z) sum_m G[o][m] from its own pass.
struct WeightGradStage {
  using Acc = int64_t;
  const double* corr;
  double s;
  float* dw;
  int64_t k;
  QAT_HOST_DEVICE void operator()(int64_t o, int64_t kk, int64_t acc) const {
    dw[o * k + kk] = static_cast<float>(s * (static_cast<double>(acc) + corr[o]));
  }
};

// The input gradient's GEMM result sum_o Gx[m][o] W[o][k], kept for col2im.
struct StoreAcc {
  using Acc = int32_t;
  int32_t* acc;
  int64_t k;
  QAT_HOST_DEVICE void operator()(int64_t m, int64_t kk, int32_t v) const { acc[m * k + kk] = v; }
};

// The int64 sum of term(n, c, m, ki, kj) over the (output position m, tap)
// pairs whose window reads input pixel i = (n, c, y, x): col2im as a gather.
template <class Term>
QAT_HOST_DEVICE inline int64_t sum_over_readers(int64_t i, const Geometry& g, const Term& term) {
  const int64_t x = i % g.w, y = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.c, n = i / (g.w * g.h * g.c);
  int64_t sum = 0;
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    const int64_t ty = y + g.pad_h - ki * g.dil_h;
    if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= g.oh) continue;
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int64_t tx = x + g.pad_w - kj * g.dil_w;
      if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= g.ow) continue;
      sum += term(n, c, n * g.P() + (ty / g.stride_h) * g.ow + tx / g.stride_w, ki, kj);
    }
  }
  return sum;
}

// dX[n][c][y][x] = float(s * sum), the sum in int64 over the (output
// position, tap) pairs whose patch reads that pixel: col2im as a gather.
QAT_HOST_DEVICE inline float col2im_at(int64_t i, const int32_t* acc, const Geometry& g, double s) {
  const int64_t K = g.K();
  const int64_t sum = sum_over_readers(i, g, [&](int64_t, int64_t c, int64_t m, int64_t ki, int64_t kj) {
    return int64_t{acc[m * K + (c * g.kh + ki) * g.kw + kj]};
  });
  return static_cast<float>(s * static_cast<double>(sum));
}

// ---------------------------------------------------------------- depthwise layers
// Note [INT8 training of depthwise layers]: a depthwise layer's three
// products as per-index bodies, for the CPU (a parallel loop) and any
// executor alike. u: the input's integers (NCHW); W (C, K), K = kh kw; G
// (C, M) and Gx (M, C) as the dense layers lay them out.

// The integer that tap t of output position p reads in plane (n, c), or pad.
QAT_HOST_DEVICE inline int32_t depthwise_tap(const uint8_t* u, const Geometry& g, int64_t n, int64_t c, int64_t p,
                                             int64_t t, uint8_t pad) {
  const int64_t iy = (p / g.ow) * g.stride_h - g.pad_h + (t / g.kw) * g.dil_h;
  const int64_t ix = (p % g.ow) * g.stride_w - g.pad_w + (t % g.kw) * g.dil_w;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return pad;
  return u[((n * g.c + c) * g.h + iy) * g.w + ix];
}

// Y[i], i = (n, c, p): float(s[c] (sum_t u W[c][t] - corr[c])) + b[c]
// (s and corr as the dense forward's, ForwardStage); the sum exact in int32.
struct DepthwiseForward {
  const uint8_t* u;
  const int8_t* w;
  const double* s;
  const double* corr;
  const float* bias;  // or null
  float* y;
  Geometry g;
  uint8_t pad;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t P = g.P(), K = g.K(), p = i % P, c = (i / P) % g.c, n = i / (P * g.c);
    int32_t acc = 0;
    for (int64_t t = 0; t < K; ++t) acc += depthwise_tap(u, g, n, c, p, t, pad) * int32_t{w[c * K + t]};
    y[i] = static_cast<float>(s[c] * (static_cast<double>(acc) - corr[c])) + (bias ? bias[c] : 0.f);
  }
};

// dW[i], i = (c, t): float(s (sum_m G[c][m] (u - 128) + corr[c])), corr[c] =
// (128 - z) sum_m G[c][m] (WeightGradStage's); the sum exact in int64.
struct DepthwiseWeightGrad {
  const uint8_t* u;
  const int8_t* G;
  const double* corr;
  double s;
  float* dw;
  Geometry g;
  uint8_t pad;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t K = g.K(), P = g.P(), M = g.M(), c = i / K, t = i % K;
    int64_t acc = 0;
    for (int64_t m = 0; m < M; ++m) {
      const int64_t gv = G[c * M + m];
      if (gv != 0) acc += gv * (depthwise_tap(u, g, m / P, c, m % P, t, pad) - 128);
    }
    dw[i] = static_cast<float>(s * (static_cast<double>(acc) + corr[c]));
  }
};

// dX[i], i = (n, c, y, x): float(s sum Gx[m][c] W[c][t]) over the (position,
// tap) pairs whose window reads that pixel (col2im_at's gather); exact in int64.
struct DepthwiseInputGrad {
  const int8_t *gx, *w;
  float* dx;
  Geometry g;
  double s;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t K = g.K(), C = g.c;
    const int8_t* pg = gx;
    const int8_t* pw = w;
    const int64_t kw = g.kw;
    const int64_t sum = sum_over_readers(i, g, [=](int64_t, int64_t c, int64_t m, int64_t ki, int64_t kj) {
      return int64_t{pg[m * C + c]} * pw[c * K + ki * kw + kj];
    });
    dx[i] = static_cast<float>(s * static_cast<double>(sum));
  }
};

// ---------------------------------------------------------------- gradients
struct GradQuantizer {
  float inv;
  int qmax;
  GradRounding rounding;
  uint64_t mixed_key;  // mix64(noise key)
  QAT_HOST_DEVICE int8_t operator()(float v, int64_t index) const {
    const float u =
        rounding == GradRounding::stochastic ? sr_uniform_mixed(mixed_key, static_cast<uint64_t>(index)) : 0.f;
    return quantize_grad_value(v, inv, qmax, rounding, u);
  }
};

// dY (N, O, P) at (output row m, channel o).
QAT_HOST_DEVICE inline float grad_at(const float* dy, const Geometry& g, int64_t m, int64_t o) {
  const int64_t P = g.P();
  return dy[((m / P) * g.o + o) * P + m % P];
}

}  // namespace qat::quant::int8_math
